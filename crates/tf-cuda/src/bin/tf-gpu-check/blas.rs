//! cuBLASLt on our stream: an FP8 GEMM against an exact f64 sum on the host, then the FP8 matrix rate.

use serde_json::json;
use tf_core::formats::e4m3_table;
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Blas, Error, Gpu};

/// (m, n, k): a small square-ish case and a decode-like weight shape.
const SHAPES: [(usize, usize, usize); 2] = [(96, 256, 512), (16, 4096, 5120)];
/// Declared before measuring: bf16 output rounding (2^-8 relative, doubled) plus slack on Σ|a·b| for the tensor cores' accumulation; a wrong layout misses by far more.
const REL_TOL: f64 = 1.0 / 128.0;
const SUM_TOL: f64 = 1.0 / 512.0;

/// Random E4M3 codes without NaN patterns, exponents kept small so sums stay far from bf16's range.
fn codes(rng: &mut SplitMix64, len: usize) -> Vec<u8> {
    (0..len).map(|_| (rng.next_u64() as u8) & 0xBF).collect()
}

pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let mut blas = Blas::new(gpu)?;
    let lut = e4m3_table();
    for (m, n, k) in SHAPES {
        let (a, b) = (codes(rng, m * k), codes(rng, n * k));
        let (ad, bd) = (gpu.upload(&a)?, gpu.upload(&b)?);
        let mut dd = gpu.pool().take(m * n * 2)?;
        blas.fp8_gemm_bf16(ad.dev(), bd.dev(), dd.dev_mut(), (m, n, k))?;
        let d: Vec<u16> = gpu.download(&dd)?;
        let (mut worst, mut pass) = (0.0f64, true);
        for i in 0..m {
            for j in 0..n {
                let (ar, br) = (&a[i * k..(i + 1) * k], &b[j * k..(j + 1) * k]);
                let prods = ar.iter().zip(br).map(|(&x, &y)| f64::from(lut[x as usize]) * f64::from(lut[y as usize]));
                let (exact, mag) = prods.fold((0.0, 0.0), |(s, a), p: f64| (s + p, a + p.abs()));
                let got = f64::from(f32::from_bits(u32::from(d[i * n + j]) << 16));
                let err = (got - exact).abs();
                pass &= got.is_finite() && err <= REL_TOL * exact.abs() + SUM_TOL * mag;
                worst = worst.max(err / (exact.abs() + mag).max(f64::MIN_POSITIVE));
            }
        }
        let case = format!("{m}×{n}×{k}");
        report.row("cublasLt fp8 gemm", &case, format!("worst |Δ| / (|exact| + Σ|a·b|) = {worst:.2e}"), pass);
        report.push("cublaslt", json!({"shape": [m, n, k], "worst": worst, "pass": pass}));
    }
    let rate = tf_cuda::blas::fp8_rate(gpu, &[(8192, 8192, 8192)], 20)?;
    report.row("cublasLt fp8 rate", "8192³", format!("{rate:.0} TFLOP/s"), rate > 0.0);
    report.set("fp8_tflops", rate.into());
    Ok(())
}
