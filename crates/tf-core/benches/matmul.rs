//! Matmul throughput against a naive triple loop, measured in one run so the ratio is what counts.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use tf_core::ops::matmul_nt;

fn naive(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum();
        }
    }
    c
}

fn data(len: usize, seed: u32) -> Vec<f32> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / 16777216.0 - 0.5).collect()
}

fn bench(c: &mut Criterion) {
    for &(m, n, k) in &[(1usize, 4096usize, 4096usize), (64, 1024, 1024), (256, 512, 2048)] {
        let a = data(m * k, 1);
        let b = data(n * k, 2);
        let mut g = c.benchmark_group(format!("matmul_{m}x{n}x{k}"));
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        g.sample_size(10);
        g.bench_function("tf_core", |bch| bch.iter(|| matmul_nt(black_box(&a), black_box(&b), m, n, k)));
        g.bench_function("naive", |bch| bch.iter(|| naive(black_box(&a), black_box(&b), m, n, k)));
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
