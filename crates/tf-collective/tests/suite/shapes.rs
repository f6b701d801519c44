use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tf_collective::{Comm, CommError, InProcessComm};

use crate::harness::{bits, rank_data, run_ranks, serial_sum};

#[test]
fn all_gather_concatenates_in_rank_order() {
    for world in [1, 2, 3, 4, 8] {
        let len = 13;
        let results = run_ranks(InProcessComm::group(world), move |comm| {
            let input = rank_data(5, comm.rank(), len);
            let mut out = vec![f32::NAN; len * comm.world_size()];
            comm.all_gather(&input, &mut out).unwrap();
            out
        });
        let want: Vec<f32> = (0..world).flat_map(|r| rank_data(5, r, len)).collect();
        for (rank, got) in results.iter().enumerate() {
            assert_eq!(bits(got), bits(&want), "world {world}, rank {rank}");
        }
    }
}

#[test]
fn broadcast_copies_root_buffer_for_every_root() {
    for world in [1, 2, 3, 4, 8] {
        for root in 0..world {
            let results = run_ranks(InProcessComm::group(world), move |comm| {
                let mut buf = rank_data(9, comm.rank(), 21);
                comm.broadcast(&mut buf, root).unwrap();
                buf
            });
            let want = bits(&rank_data(9, root, 21));
            for (rank, got) in results.iter().enumerate() {
                assert_eq!(bits(got), want, "world {world}, root {root}, rank {rank}");
            }
        }
    }
}

#[test]
fn broadcast_bytes_resizes_followers() {
    let results = run_ranks(InProcessComm::group(4), |comm| {
        let mut msg = if comm.rank() == 2 { b"step 42: decode".to_vec() } else { vec![0xAB; 3 + 100 * comm.rank()] };
        comm.broadcast_bytes(&mut msg, 2).unwrap();
        msg
    });
    for (rank, msg) in results.iter().enumerate() {
        assert_eq!(msg.as_slice(), b"step 42: decode", "rank {rank}");
    }
}

#[test]
fn barrier_waits_for_every_rank() {
    let world = 6;
    let arrived = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&arrived);
    let results = run_ranks(InProcessComm::group(world), move |comm| {
        std::thread::sleep(std::time::Duration::from_millis(5 * comm.rank() as u64));
        seen.fetch_add(1, Ordering::SeqCst);
        comm.barrier().unwrap();
        seen.load(Ordering::SeqCst)
    });
    assert_eq!(results, vec![world; world]);
    assert_eq!(arrived.load(Ordering::SeqCst), world);
}

/// Lockstep loop: the leader picks each step, everyone runs the same collectives on it and checks them.
#[test]
fn hundred_lockstep_iterations_stay_in_sync() {
    let world = 4;
    let chunk = 8;
    let results = run_ranks(InProcessComm::group(world), move |comm| {
        let mut steps = Vec::new();
        for iteration in 0..100u64 {
            let mut msg = if comm.is_leader() { (iteration * 7 + 1).to_le_bytes().to_vec() } else { Vec::new() };
            comm.broadcast_bytes(&mut msg, 0).unwrap();
            let step = u64::from_le_bytes(msg.try_into().unwrap());
            steps.push(step);
            let inputs: Vec<Vec<f32>> = (0..world).map(|r| rank_data(step, r, chunk * world)).collect();
            let want = serial_sum(&inputs);
            let mut buf = inputs[comm.rank()].clone();
            comm.all_reduce_sum(&mut buf).unwrap();
            assert_eq!(bits(&buf), bits(&want), "iteration {iteration}");
            let mut mine = vec![0.0; chunk];
            comm.reduce_scatter_sum(&inputs[comm.rank()], &mut mine).unwrap();
            let r = comm.rank();
            assert_eq!(bits(&mine), bits(&want[r * chunk..(r + 1) * chunk]));
            let mut gathered = vec![0.0; chunk * world];
            comm.all_gather(&mine, &mut gathered).unwrap();
            assert_eq!(bits(&gathered), bits(&want), "iteration {iteration}");
            let root = (step as usize) % world;
            let mut shared = vec![comm.rank() as f32; 2];
            comm.broadcast(&mut shared, root).unwrap();
            assert_eq!(shared, vec![root as f32; 2]);
            comm.barrier().unwrap();
        }
        steps
    });
    let want: Vec<u64> = (0..100).map(|i| i * 7 + 1).collect();
    for steps in &results {
        assert_eq!(steps, &want);
    }
}

#[test]
fn world_of_one_is_a_no_op_copy() {
    let comm = InProcessComm::group(1).pop().unwrap();
    let odd = [-0.0, f32::from_bits(0x7FC0_1234), 1.0e-42, f32::MAX, -3.25];
    let mut buf = odd;
    comm.all_reduce_sum(&mut buf).unwrap();
    assert_eq!(bits(&buf), bits(&odd));
    let mut out = [0.0; 5];
    comm.all_gather(&odd, &mut out).unwrap();
    assert_eq!(bits(&out), bits(&odd));
    let mut out = [0.0; 5];
    comm.reduce_scatter_sum(&odd, &mut out).unwrap();
    assert_eq!(bits(&out), bits(&odd));
    let mut buf = odd;
    comm.broadcast(&mut buf, 0).unwrap();
    assert_eq!(bits(&buf), bits(&odd));
    let mut msg = b"hello".to_vec();
    comm.broadcast_bytes(&mut msg, 0).unwrap();
    assert_eq!(msg, b"hello");
    comm.barrier().unwrap();
    let err = comm.broadcast(&mut buf, 1).unwrap_err();
    assert_eq!(err, CommError::RootOutOfRange { rank: 0, root: 1, world: 1 });
    assert_eq!(bits(&buf), bits(&odd));
}

#[test]
fn empty_group_and_empty_buffers() {
    assert!(InProcessComm::group(0).is_empty());
    let results = run_ranks(InProcessComm::group(3), |comm| {
        let mut empty: [f32; 0] = [];
        comm.all_reduce_sum(&mut empty).unwrap();
        let mut out: [f32; 0] = [];
        comm.all_gather(&[], &mut out).unwrap();
        comm.world_size()
    });
    assert_eq!(results, vec![3; 3]);
}
