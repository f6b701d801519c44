//! Matmul: correct against f64, and bit-identical whatever the batch, thread count or SIMD path.

use tf_core::ops::matmul::{matmul_nt, matmul_nt_scalar};
use tf_core::ops::{rms_norm_bf16, softmax_in_place};
use tf_core::{bf16, formats::to_bf16};

fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

#[test]
fn matches_f64_reference() {
    for &(m, n, k) in &[(1, 1, 1), (3, 5, 7), (2, 4, 8), (33, 65, 130), (1, 300, 515), (70, 9, 1024)] {
        let (a, b) = (data(m * k, 1), data(n * k, 2));
        let c = matmul_nt(&a, &b, m, n, k);
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|p| a[i * k + p] as f64 * b[j * k + p] as f64).sum();
                let tol = 1e-5 * (k as f64).sqrt() + 1e-6;
                assert!((c[i * n + j] as f64 - want).abs() <= tol, "({m},{n},{k})[{i},{j}] {} vs {want}", c[i * n + j]);
            }
        }
    }
}

#[test]
fn rows_are_batch_invariant() {
    let (m, n, k) = (67, 131, 257);
    let (a, b) = (data(m * k, 3), data(n * k, 4));
    let full = matmul_nt(&a, &b, m, n, k);
    for i in [0, 1, 33, 66] {
        let one = matmul_nt(&a[i * k..(i + 1) * k], &b, 1, n, k);
        assert_eq!(one, full[i * n..(i + 1) * n], "row {i} alone differs from row {i} in a batch");
    }
}

#[test]
fn thread_count_and_simd_do_not_change_bits() {
    let (m, n, k) = (40, 200, 300);
    let (a, b) = (data(m * k, 5), data(n * k, 6));
    let many = matmul_nt(&a, &b, m, n, k);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let one = pool.install(|| matmul_nt(&a, &b, m, n, k));
    assert_eq!(many, one);
    assert_eq!(many, matmul_nt_scalar(&a, &b, m, n, k));
}

#[test]
fn rms_norm_and_softmax() {
    let x: Vec<bf16> = [3.0f32, 4.0].iter().map(|&v| to_bf16(v)).collect();
    let w = vec![to_bf16(1.0), to_bf16(2.0)];
    let mut out = vec![bf16::ZERO; 2];
    rms_norm_bf16(&x, &w, 1e-20, &mut out);
    let r = (12.5f32).sqrt();
    assert_eq!(out, vec![to_bf16(3.0 / r), to_bf16(2.0 * (4.0 / r))]);
    let mut s = vec![1.0f32, 2.0, 3.0];
    softmax_in_place(&mut s);
    assert!((s.iter().sum::<f32>() - 1.0).abs() < 1e-6 && s[2] > s[1]);
    let mut dead = vec![f32::NEG_INFINITY; 3];
    softmax_in_place(&mut dead);
    assert_eq!(dead, vec![0.0; 3], "an all-masked row gives zeros, not NaN");
}
