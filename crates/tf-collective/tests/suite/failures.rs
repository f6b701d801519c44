use std::thread;
use std::time::{Duration, Instant};

use tf_collective::{Comm, CommError, InProcessComm};

use crate::harness::{HANG_LIMIT, run_ranks};

/// Every rank must see the same error, and an errored call must leave its buffer untouched.
fn assert_same_error_everywhere(results: &[Result<(), CommError>]) -> CommError {
    let first = results[0].clone().expect_err("rank 0 should have failed");
    for (rank, result) in results.iter().enumerate() {
        assert_eq!(result.as_ref().err(), Some(&first), "rank {rank}");
    }
    first
}

#[test]
fn mismatched_all_reduce_lengths_error_on_every_rank_and_group_recovers() {
    let results = run_ranks(InProcessComm::group(3), |comm| {
        let len = if comm.rank() == 1 { 5 } else { 4 };
        let mut buf = vec![comm.rank() as f32; len];
        let failed = comm.all_reduce_sum(&mut buf);
        assert_eq!(buf, vec![comm.rank() as f32; len], "buffer changed on error");
        let mut ok = vec![1.0; 4];
        comm.all_reduce_sum(&mut ok).unwrap();
        assert_eq!(ok, vec![3.0; 4]);
        failed
    });
    let err = assert_same_error_everywhere(&results);
    assert!(matches!(err, CommError::LengthMismatch { .. }), "{err}");
}

#[test]
fn bad_gather_and_scatter_shapes_error_on_every_rank() {
    let results = run_ranks(InProcessComm::group(3), |comm| {
        let out_len = if comm.rank() == 2 { 5 } else { 6 };
        let mut out = vec![0.0; out_len];
        comm.all_gather(&[1.0, 2.0], &mut out)
    });
    let err = assert_same_error_everywhere(&results);
    assert!(matches!(err, CommError::LengthMismatch { .. }), "{err}");
    let results = run_ranks(InProcessComm::group(2), |comm| {
        let mut out = vec![0.0; 3];
        comm.reduce_scatter_sum(&[1.0; 7], &mut out)
    });
    let err = assert_same_error_everywhere(&results);
    assert!(matches!(err, CommError::LengthMismatch { .. }), "{err}");
}

#[test]
fn root_out_of_range_errors_on_every_rank() {
    let results = run_ranks(InProcessComm::group(4), |comm| {
        let mut buf = vec![0.0; 2];
        comm.broadcast(&mut buf, 4)
    });
    let err = assert_same_error_everywhere(&results);
    assert_eq!(err, CommError::RootOutOfRange { rank: 0, root: 4, world: 4 });
    let results = run_ranks(InProcessComm::group(2), |comm| {
        let root = if comm.rank() == 1 { 9 } else { 0 };
        comm.broadcast_bytes(&mut vec![1, 2, 3], root)
    });
    let err = assert_same_error_everywhere(&results);
    assert_eq!(err, CommError::RootOutOfRange { rank: 1, root: 9, world: 2 });
}

#[test]
fn disagreeing_roots_or_collectives_error_on_every_rank() {
    let results = run_ranks(InProcessComm::group(3), |comm| {
        let mut buf = vec![0.0; 2];
        comm.broadcast(&mut buf, comm.rank() % 2)
    });
    let err = assert_same_error_everywhere(&results);
    assert!(matches!(err, CommError::OpMismatch { .. }), "{err}");
    let results = run_ranks(InProcessComm::group(2), |comm| {
        if comm.is_leader() { comm.barrier() } else { comm.all_reduce_sum(&mut [1.0]) }
    });
    let err = assert_same_error_everywhere(&results);
    assert!(matches!(err, CommError::OpMismatch { .. }), "{err}");
}

#[test]
fn rank_dropped_before_collective_fails_peers_promptly() {
    let results = run_ranks(InProcessComm::group(4), |comm| {
        if comm.rank() == 3 {
            drop(comm);
            return None;
        }
        let start = Instant::now();
        let result = comm.all_reduce_sum(&mut [1.0; 8]);
        Some((result, start.elapsed()))
    });
    for (rank, outcome) in results.iter().enumerate().take(3) {
        let (result, took) = outcome.clone().unwrap();
        assert_eq!(result, Err(CommError::PeerGone { rank: 3 }), "rank {rank}");
        assert!(took < HANG_LIMIT / 4, "rank {rank} took {took:?}");
    }
}

#[test]
fn rank_dropped_while_peers_wait_wakes_them() {
    let delay = Duration::from_millis(150);
    let start = Instant::now();
    let results = run_ranks(InProcessComm::group(3), move |comm| {
        if comm.rank() == 1 {
            thread::sleep(delay);
            drop(comm);
            return None;
        }
        let mut buf = [0.0; 4];
        let result = comm.broadcast(&mut buf, 1);
        Some((result, start.elapsed()))
    });
    for rank in [0, 2] {
        let (result, took) = results[rank].clone().unwrap();
        assert_eq!(result, Err(CommError::PeerGone { rank: 1 }), "rank {rank}");
        assert!(took >= delay, "rank {rank} returned before the drop: {took:?}");
        assert!(took < HANG_LIMIT / 4, "rank {rank} took {took:?}");
    }
}

#[test]
fn rank_finishing_early_does_not_spoil_the_last_collective() {
    for _ in 0..50 {
        let results = run_ranks(InProcessComm::group(4), |comm| {
            let mut buf = [comm.rank() as f32];
            comm.all_reduce_sum(&mut buf).map(|()| buf[0])
        });
        assert_eq!(results, vec![Ok(6.0); 4]);
    }
}

#[test]
fn silent_rank_times_out_the_group() {
    let timeout = Duration::from_millis(100);
    // One shared start: the first rank to time out breaks the group, so later entrants fail sooner.
    let start = Instant::now();
    let results = run_ranks(InProcessComm::group_with_timeout(3, timeout), move |comm| {
        if comm.rank() == 2 {
            thread::sleep(timeout * 3);
        }
        let result = comm.all_reduce_sum(&mut [1.0]);
        (result, start.elapsed())
    });
    for (rank, (result, took)) in results.iter().take(2).enumerate() {
        assert_eq!(result, &Err(CommError::Timeout { after: timeout }), "rank {rank}");
        assert!(*took >= timeout, "rank {rank} gave up early: {took:?}");
        assert!(*took < HANG_LIMIT / 4, "rank {rank} took {took:?}");
    }
    assert_eq!(results[2].0, Err(CommError::Timeout { after: timeout }), "late rank");
}

#[test]
fn generous_timeout_does_not_fire_in_normal_use() {
    let results = run_ranks(InProcessComm::group_with_timeout(4, HANG_LIMIT / 4), |comm| {
        for _ in 0..200 {
            let mut buf = [1.0; 3];
            comm.all_reduce_sum(&mut buf)?;
            assert_eq!(buf, [4.0; 3]);
        }
        comm.barrier()
    });
    assert_eq!(results, vec![Ok(()); 4]);
}
