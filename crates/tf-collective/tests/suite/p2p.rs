use std::time::{Duration, Instant};

use tf_collective::{Comm, CommError, InProcessComm};

use crate::harness::run_ranks;

#[path = "../common/p2p.rs"]
mod common;

#[test]
fn messages_shift_rings_keep_order_and_report_mismatches_at_every_world_size() {
    for world in 1..=5 {
        run_ranks(InProcessComm::group(world), |c| common::scenario(&c));
    }
}

#[test]
fn a_message_sent_before_its_sender_left_arrives_then_the_next_receive_fails() {
    let got = run_ranks(InProcessComm::group(2), |c| {
        if c.rank() == 1 {
            c.send(&[5.0, 6.0], 0).unwrap();
            return Ok(());
        }
        // Rank 1's handle is dropped once it returns: wait for that before receiving.
        std::thread::sleep(Duration::from_millis(100));
        let mut b = [0.0; 2];
        c.recv(&mut b, 1).unwrap();
        assert_eq!(b, [5.0, 6.0]);
        c.recv(&mut b, 1)
    });
    assert_eq!(got[0], Err(CommError::PeerGone { rank: 1 }));
}

#[test]
fn a_receive_from_a_silent_peer_times_out_and_breaks_the_group() {
    let got = run_ranks(InProcessComm::group_with_timeout(2, Duration::from_millis(200)), |c| {
        let t = Instant::now();
        let e = if c.rank() == 0 { c.recv(&mut [0.0], 1) } else { c.barrier() };
        (e, t.elapsed(), c.send(&[1.0], 1 - c.rank()))
    });
    assert!(matches!(got[0].0, Err(CommError::Timeout { .. })), "{:?}", got[0].0);
    assert!(got[0].1 < Duration::from_secs(5), "{:?}", got[0].1);
    assert!(got[0].2.is_err() && got[1].2.is_err(), "the group stays broken: {got:?}");
}
