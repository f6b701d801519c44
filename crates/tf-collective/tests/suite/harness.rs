use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use tf_collective::{Comm, InProcessComm};

/// Any run past this is a hang: the test fails instead of blocking CI.
pub const HANG_LIMIT: Duration = Duration::from_secs(20);

/// Runs `f` on one thread per rank and returns the results in rank order, failing on a hang or panic.
pub fn run_ranks<T, F>(comms: Vec<InProcessComm>, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(InProcessComm) -> T + Send + Sync + 'static,
{
    let world = comms.len();
    let f = Arc::new(f);
    let (tx, rx) = mpsc::channel();
    for comm in comms {
        let (tx, f) = (tx.clone(), Arc::clone(&f));
        thread::spawn(move || {
            let rank = comm.rank();
            let out = panic::catch_unwind(AssertUnwindSafe(|| f(comm)));
            let _ = tx.send((rank, out));
        });
    }
    drop(tx);
    let deadline = Instant::now() + HANG_LIMIT;
    let mut results: Vec<Option<T>> = (0..world).map(|_| None).collect();
    for _ in 0..world {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((rank, Ok(value))) => results[rank] = Some(value),
            Ok((rank, Err(payload))) => {
                eprintln!("rank {rank} panicked");
                panic::resume_unwind(payload);
            }
            Err(err) => panic!("ranks did not finish within {HANG_LIMIT:?}: {err}"),
        }
    }
    results.into_iter().map(|r| r.expect("every rank reported")).collect()
}

/// Deterministic values over many binades so that summation order shows up in the low bits.
pub fn data(seed: u64, len: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..len)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let mantissa = (z >> 40) as f32 / (1u64 << 24) as f32 + 0.5;
            let exponent = ((z >> 8) % 25) as i32 - 12;
            let sign = if z & 1 == 0 { 1.0 } else { -1.0 };
            sign * mantissa * 2f32.powi(exponent)
        })
        .collect()
}

/// Input of `rank` for a test keyed by `seed`.
pub fn rank_data(seed: u64, rank: usize, len: usize) -> Vec<f32> {
    data(seed * 1000 + rank as u64, len)
}

/// The contract's reference: a serial left fold over ranks 0, 1, 2, ...
pub fn serial_sum(inputs: &[Vec<f32>]) -> Vec<f32> {
    let mut acc = inputs[0].clone();
    for input in &inputs[1..] {
        for (a, x) in acc.iter_mut().zip(input) {
            *a += *x;
        }
    }
    acc
}

pub fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}
