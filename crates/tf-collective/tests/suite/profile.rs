//! The opt-in profiler: each rank's file lists its collectives in order, with bytes, times and failures, and the summary matches them.

use crate::harness::run_ranks;
use tf_collective::profile::{read_dir, summarize};
use tf_collective::{Comm, InProcessComm, Profiled};

#[test]
fn every_collective_is_recorded_in_order_on_every_rank() {
    let dir = std::env::temp_dir().join(format!("tf-profile-test-{}", std::process::id()));
    let d = dir.clone();
    run_ranks(InProcessComm::group(3), move |comm| {
        let p = Profiled::new(Box::new(comm), &d).unwrap();
        let mut buf = vec![p.rank() as f32; 4];
        p.all_reduce_sum(&mut buf).unwrap();
        assert_eq!(buf, [3.0; 4], "the wrapped group still computes");
        let mut out = vec![0.0; 6];
        p.all_gather(&[1.0, 2.0], &mut out).unwrap();
        // Rank 2 asks for another length: every rank gets the error, and the profile says so.
        let len = if p.rank() == 2 { 3 } else { 2 };
        assert!(p.broadcast(&mut vec![0.0; len], 0).is_err());
        let mut frame = if p.rank() == 0 { b"step".to_vec() } else { Vec::new() };
        if p.rank() == 0 { p.broadcast_bytes(&mut frame, 0) } else { p.broadcast_bytes_idle(&mut frame, 0) }.unwrap();
        p.barrier().unwrap();
    });
    let ranks = read_dir(&dir).unwrap();
    assert_eq!(ranks.len(), 3);
    for (r, recs) in ranks.iter().enumerate() {
        let ops: Vec<&str> = recs.iter().map(|x| x.op.as_str()).collect();
        assert_eq!(ops, ["all_reduce_sum", "all_gather", "broadcast", "broadcast_bytes", "barrier"], "rank {r}");
        assert_eq!(recs.iter().map(|x| x.seq).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        assert_eq!(recs.iter().map(|x| x.ok).collect::<Vec<_>>(), [true, true, false, true, true]);
        assert_eq!((recs[0].bytes, recs[1].bytes, recs[3].bytes), (16, 8, if r == 0 { 4 } else { 0 }));
        assert!(recs.iter().all(|x| x.rank == r && x.ready_us <= x.end_us));
    }
    let s = summarize(&ranks);
    assert!(s.starts_with("3 ranks\n"), "{s}");
    let gather = s.lines().find(|l| l.starts_with("all_gather")).unwrap();
    assert_eq!(gather.split_whitespace().take(3).collect::<Vec<_>>(), ["all_gather", "1", "24"], "{s}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn messages_are_recorded_apart_and_collectives_still_line_up() {
    let dir = std::env::temp_dir().join(format!("tf-profile-p2p-{}", std::process::id()));
    let d = dir.clone();
    run_ranks(InProcessComm::group(2), move |comm| {
        let p = Profiled::new(Box::new(comm), &d).unwrap();
        // Only rank 0 sends, so the ranks' record sequences differ in length before the barrier.
        if p.rank() == 0 {
            p.send(&[1.0, 2.0], 1).unwrap();
            p.send(&[3.0], 1).unwrap();
        } else {
            let (mut a, mut b) = ([0.0; 2], [0.0; 1]);
            p.recv(&mut a, 0).unwrap();
            p.recv(&mut b, 0).unwrap();
            assert_eq!((a, b), ([1.0, 2.0], [3.0]));
        }
        let mut got = [0.0];
        p.send_recv(&[p.rank() as f32], 1 - p.rank(), &mut got, 1 - p.rank()).unwrap();
        p.barrier().unwrap();
    });
    let ranks = read_dir(&dir).unwrap();
    let s = summarize(&ranks);
    let row = |op: &str| s.lines().find(|l| l.starts_with(op)).unwrap().split_whitespace().take(3).collect::<Vec<_>>();
    assert_eq!(row("send "), ["send", "2", "12"], "{s}");
    assert_eq!(row("recv"), ["recv", "2", "0"], "{s}");
    assert_eq!(row("send_recv"), ["send_recv", "2", "8"], "{s}");
    let barrier = s.lines().find(|l| l.starts_with("barrier")).unwrap();
    assert_ne!(barrier.split_whitespace().nth(4), Some("-"), "the barrier is matched across ranks: {s}");
    std::fs::remove_dir_all(&dir).unwrap();
}
