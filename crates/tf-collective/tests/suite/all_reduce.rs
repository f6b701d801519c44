use tf_collective::{Comm, InProcessComm};

use crate::harness::{bits, rank_data, run_ranks, serial_sum};

const LEN: usize = 1031;

fn all_reduce_run(world: usize, seed: u64) -> Vec<Vec<f32>> {
    run_ranks(InProcessComm::group(world), move |comm| {
        let mut buf = rank_data(seed, comm.rank(), LEN);
        comm.all_reduce_sum(&mut buf).unwrap();
        buf
    })
}

#[test]
fn all_reduce_matches_serial_rank_order_sum_bit_for_bit() {
    for world in [1, 2, 3, 4, 8] {
        let inputs: Vec<Vec<f32>> = (0..world).map(|r| rank_data(7, r, LEN)).collect();
        let want = bits(&serial_sum(&inputs));
        for (rank, got) in all_reduce_run(world, 7).iter().enumerate() {
            assert_eq!(bits(got), want, "world {world}, rank {rank}");
        }
    }
}

#[test]
fn test_data_is_sensitive_to_summation_order() {
    for world in [3, 4, 8] {
        let mut inputs: Vec<Vec<f32>> = (0..world).map(|r| rank_data(7, r, LEN)).collect();
        let forward = bits(&serial_sum(&inputs));
        inputs.reverse();
        let backward = bits(&serial_sum(&inputs));
        let differing = forward.iter().zip(&backward).filter(|(a, b)| a != b).count();
        assert!(differing > 0, "world {world}: order-blind data would hide a wrong order");
    }
}

#[test]
fn all_reduce_is_identical_across_runs() {
    for world in [3, 8] {
        let first: Vec<Vec<u32>> = all_reduce_run(world, 11).iter().map(|b| bits(b)).collect();
        for _ in 0..5 {
            let again: Vec<Vec<u32>> = all_reduce_run(world, 11).iter().map(|b| bits(b)).collect();
            assert_eq!(again, first, "world {world}");
        }
    }
}

#[test]
fn reduce_scatter_equals_slice_of_all_reduce() {
    for world in [1, 2, 3, 4, 8] {
        let chunk = 37;
        let results = run_ranks(InProcessComm::group(world), move |comm| {
            let input = rank_data(3, comm.rank(), chunk * comm.world_size());
            let mut mine = vec![f32::NAN; chunk];
            comm.reduce_scatter_sum(&input, &mut mine).unwrap();
            let mut full = input.clone();
            comm.all_reduce_sum(&mut full).unwrap();
            (mine, full)
        });
        for (rank, (mine, full)) in results.iter().enumerate() {
            let slice = &full[rank * chunk..(rank + 1) * chunk];
            assert_eq!(bits(mine), bits(slice), "world {world}, rank {rank}");
        }
    }
}

#[test]
fn trait_objects_work() {
    let comms: Vec<Box<dyn Comm>> = InProcessComm::group(1).into_iter().map(|c| Box::new(c) as Box<dyn Comm>).collect();
    let mut buf = vec![1.5, -2.0];
    comms[0].all_reduce_sum(&mut buf).unwrap();
    assert_eq!(buf, vec![1.5, -2.0]);
    assert!(comms[0].is_leader());
    assert_eq!(comms[0].world_size(), 1);
}
