//! EXL3 on the GPU against `Exl3Weight`: decoded tiles and `y = x·W`, bit for bit, then a first time per call.

use crate::{Report, time_row};
use serde_json::json;
use tf_core::rng::SplitMix64;
use tf_cuda::{Error, Gpu};
use tf_exl3::exl3::encode::random_weight;
use tf_exl3::exl3_cuda::GpuExl3;
use tf_exl3::{Codebook, Exl3Weight};

/// Every K and codebook on a small matrix, then the expert shapes at the published checkpoint's codebook.
pub fn cases() -> Vec<(usize, usize, usize, Codebook)> {
    let small = (1..=8).flat_map(|k| [Codebook::Inst3, Codebook::Mcg, Codebook::Mul1].map(|cb| (256, 384, k, cb)));
    small.chain([(5120, 2304, 3, Codebook::Mul1), (2304, 5120, 2, Codebook::Mul1)]).collect()
}

/// Rows of f32 activations around unit scale.
pub fn acts(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.normal()).collect()
}

/// A random weight of one of [`cases`] (with a bias when `bias`), uploaded, and the case's name.
pub fn case_weight<'g>(
    gpu: &'g Gpu,
    rng: &mut SplitMix64,
    (in_p, out_p, k, cb): (usize, usize, usize, Codebook),
    bias: bool,
) -> Result<(Exl3Weight, GpuExl3<'g>, String), Error> {
    let mut w: Exl3Weight = random_weight(rng, (in_p, out_p, k), cb, 1.0);
    if bias {
        w.bias = Some(acts(rng, out_p));
    }
    let g = GpuExl3::upload(gpu, &w)?;
    Ok((w, g, format!("{in_p}×{out_p} K={k} {cb:?}")))
}

/// `forward_exact` on fresh rows against `Exl3Weight::forward`: outputs whose bits differ, outputs, all finite, max |Δ|.
pub fn exact_against_cpu(
    gpu: &Gpu,
    rng: &mut SplitMix64,
    (w, g): (&Exl3Weight, &GpuExl3<'_>),
    rows: usize,
) -> Result<(usize, usize, bool, f32), Error> {
    let x = acts(rng, rows * w.in_p);
    let want = w.forward(&x, rows);
    let y: Vec<f32> = gpu.download(&g.forward_exact(gpu, &gpu.upload(&x)?, rows)?)?;
    let bits = y.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    let worst = y.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    Ok((bits, y.len(), y.iter().all(|v| v.is_finite()), worst))
}

/// Declared before measuring: tolerance 0 for both, as every kernel step is the CPU's operation in the CPU's order.
pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    for (i, shape) in cases().into_iter().enumerate() {
        let (w, g, case) = case_weight(gpu, rng, shape, i % 5 == 0)?;
        let (in_p, out_p) = (w.in_p, w.out_p);
        let mut q = gpu.pool().take(in_p * out_p * 2)?;
        g.decode_q(gpu, &mut q)?;
        let got: Vec<u16> = gpu.download(&q)?;
        let differ = got.iter().zip(w.decode_q()).filter(|(a, b)| **a != *b).count();
        report.row("exl3 decode_q", &case, format!("{differ} of {} fp16 values differ", got.len()), differ == 0);
        for rows in if in_p * out_p > 1 << 20 { vec![1, 8] } else { vec![1, 2, 3, 11] } {
            let (bits, len, finite, worst) = exact_against_cpu(gpu, rng, (&w, &g), rows)?;
            let what = format!("{rows} rows: {bits} of {len} outputs differ in bits, max |Δ| {worst:e}");
            report.row("exl3 forward_exact", &case, what, bits == 0 && finite);
            report.push("exl3", json!({"case": case, "rows": rows, "decode_differ": differ, "forward_differ": bits}));
        }
    }
    // One row of the in-order kernel on the w1/w3 shape, warm in L2, for comparison with the fast path's cold rows.
    let w = random_weight(rng, (5120, 2304, 3), Codebook::Mul1, 1.0);
    let g = GpuExl3::upload(gpu, &w)?;
    let x = gpu.upload(&acts(rng, 5120))?;
    drop(g.forward_exact(gpu, &x, 1)?);
    let reps = 20;
    let ms = gpu.time_ms(|gpu| (0..reps).try_for_each(|_| g.forward_exact(gpu, &x, 1).map(drop)))?;
    let bytes = 5120 * 2304 * 3 / 8 + (5120 + 2304) * 2;
    time_row(
        report,
        "exl3 forward_exact 1×5120→2304 K=3 (split order, warm L2)",
        ms * 1e3 / reps as f32,
        bytes,
        copy_gbps,
    );
    Ok(())
}
