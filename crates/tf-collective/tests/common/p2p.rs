//! One point-to-point scenario for any communicator and world size (the in-process suite and the TCP processes both run it).

use tf_collective::{Comm, CommError};

/// Values that differ by sender, round and length.
pub fn msg(rank: usize, round: usize, len: usize) -> Vec<f32> {
    (0..len).map(|i| (rank * 1000 + round * 10 + i) as f32 + 0.25).collect()
}

/// Ring shifts both ways, ordered pairs, a length mismatch, self-messages and bad peers; asserts each result.
pub fn scenario(c: &dyn Comm) {
    let (r, w) = (c.rank(), c.world_size());
    let (right, left) = ((r + 1) % w, (r + w - 1) % w);
    for round in 0..2 {
        let (mine, mut got) = (msg(r, round, 5 + round), vec![0.0; 5 + round]);
        c.send_recv(&mine, right, &mut got, left).unwrap();
        assert_eq!(got, msg(left, round, 5 + round), "rank {r} hears its left neighbour");
        c.send_recv(&mine, left, &mut got, right).unwrap();
        assert_eq!(got, msg(right, round, 5 + round), "rank {r} hears its right neighbour");
    }
    // Rank 0 sends each other rank three messages and then hears one back from each, in reverse rank order.
    if r == 0 {
        for q in 1..w {
            (0..3).for_each(|i| c.send(&msg(q, 10 + i, 3), q).unwrap());
        }
        for q in (1..w).rev() {
            let mut b = vec![0.0; 2];
            c.recv(&mut b, q).unwrap();
            assert_eq!(b, msg(q, 20, 2));
        }
    } else {
        for i in 0..3 {
            let mut b = vec![0.0; 3];
            c.recv(&mut b, 0).unwrap();
            assert_eq!(b, msg(r, 10 + i, 3), "messages between two ranks keep their order");
        }
        c.send(&msg(r, 20, 2), 0).unwrap();
    }
    let mut two = [7.0f32; 2];
    let e = c.send_recv(&[1.0, 2.0, 3.0], right, &mut two, left);
    assert!(matches!(e, Err(CommError::LengthMismatch { .. })), "rank {r}: {e:?}");
    assert_eq!(two, [7.0; 2], "a refused message leaves the buffer as it was");
    let mut one = [0.0f32];
    c.send_recv(&[4.0 + r as f32], right, &mut one, left).unwrap();
    assert_eq!(one, [4.0 + left as f32], "the message after a mismatch arrives whole");
    c.send(&[9.0], r).unwrap();
    c.recv(&mut one, r).unwrap();
    assert_eq!(one, [9.0], "a rank may message itself");
    assert!(
        matches!(c.recv(&mut one, r), Err(CommError::OpMismatch { .. })),
        "nothing to itself is an error, not a wait"
    );
    assert!(matches!(c.send(&[1.0], w), Err(CommError::PeerOutOfRange { .. })));
    assert!(matches!(c.recv(&mut one, w + 3), Err(CommError::PeerOutOfRange { .. })));
    assert!(matches!(c.send_recv(&[1.0], r, &mut one, w), Err(CommError::PeerOutOfRange { .. })));
    c.barrier().expect("collectives and messages share the group");
}
