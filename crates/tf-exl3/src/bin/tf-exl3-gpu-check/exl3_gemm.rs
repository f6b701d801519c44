//! The EXL3 prompt GEMM (Qᵀ decoded to fp16, cuBLASLt fp16 GEMM) against the CPU within a declared bound, and its rate at 4,096 rows.

use crate::exl3::acts;
use crate::exl3_fast::bound;
use crate::{Report, SAMPLES};
use serde_json::json;
use tf_core::formats::{f16_bits_to_f32, f32_to_f16_bits};
use tf_core::rng::SplitMix64;
use tf_cuda::blas::{Blas, Gemm, rate};
use tf_cuda::timing::median;
use tf_cuda::{Error, Gpu};
use tf_exl3::exl3::encode::random_weight;
use tf_exl3::exl3_cuda::GpuExl3;
use tf_exl3::{Codebook, Exl3Weight};

/// Declared before measuring: per column before Hadamard out, |Δ| ≤ 2^-10 · Σ_i |xh_i·q_ic| (x rounded once to fp16, f32 sums).
const REL_GEMM: f64 = 1.0 / 1024.0;
/// Rows of the prompt GEMM target.
const PROMPT_ROWS: usize = 4096;

pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let mut blas = Blas::new(gpu)?;
    let cases =
        [(256, 384, 3, Codebook::Mul1, 40), (256, 384, 5, Codebook::Inst3, 3), (5120, 2304, 3, Codebook::Mul1, 64)];
    for (i, (in_p, out_p, k, cb, rows)) in cases.into_iter().enumerate() {
        let mut w: Exl3Weight = random_weight(rng, (in_p, out_p, k), cb, 1.0);
        if i == 1 {
            w.bias = Some(acts(rng, out_p));
        }
        let g = GpuExl3::upload(gpu, &w)?;
        let qf: Vec<f32> = w.decode_q().into_iter().map(f16_bits_to_f32).collect();
        let x = acts(rng, rows * in_p);
        let want = w.forward_q(&qf, &x, rows);
        let y: Vec<f32> = gpu.download(&g.forward_gemm(gpu, &mut blas, &gpu.upload(&x)?, rows)?)?;
        let tol = bound(&w, &qf, &x, &want, REL_GEMM);
        let over = y.iter().zip(&want).zip(&tol).filter(|((a, b), t)| f64::from((*a - *b).abs()) > **t).count();
        let worst = y.iter().zip(&want).zip(&tol).map(|((a, b), t)| f64::from((a - b).abs()) / t).fold(0.0, f64::max);
        let finite = y.iter().all(|v| v.is_finite());
        let case = format!("{in_p}×{out_p} K={k} {cb:?}, {rows} rows");
        report.row(
            "exl3 forward_gemm",
            &case,
            format!("{over} of {} over the bound, worst {worst:.3} of it", y.len()),
            over == 0 && finite,
        );
        report.push("exl3_gemm", json!({"case": case, "over": over, "worst_of_bound": worst}));
    }
    timing(gpu, rng, report, &mut blas)
}

/// 4,096 prompt rows through each expert shape at K = 2, 3, 4, against the bf16 matrix rate measured in this run.
fn timing(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, blas: &mut Blas<'_>) -> Result<(), Error> {
    let bf16 = rate(gpu, Gemm::Bf16, &[(8192, 8192, 8192)], 20)?;
    report.row("bf16 rate", "cuBLASLt 8192³, best of 20", format!("{bf16:.0} TFLOP/s"), bf16 > 0.0);
    report.json.insert("bf16_tflops".into(), json!(bf16));
    for (in_p, out_p) in [(5120, 2304), (2304, 5120)] {
        for k in 2..=4 {
            let w = random_weight(rng, (in_p, out_p, k), Codebook::Mul1, 1.0);
            let g = GpuExl3::upload(gpu, &w)?;
            let x = gpu.upload(&acts(rng, PROMPT_ROWS * in_p))?;
            drop(g.forward_gemm(gpu, blas, &x, PROMPT_ROWS)?);
            let ms = (0..SAMPLES.min(11))
                .map(|_| gpu.time_ms(|gpu| g.forward_gemm(gpu, blas, &x, PROMPT_ROWS).map(drop)))
                .collect::<Result<Vec<f32>, Error>>()?;
            let us = f64::from(median(&ms)) * 1e3;
            let tflops = 2.0 * (PROMPT_ROWS * in_p * out_p) as f64 / (us * 1e-6) / 1e12;
            let case = format!("exl3 forward_gemm {PROMPT_ROWS}×{in_p}→{out_p} K={k}");
            let what = format!("{us:.1} µs, {tflops:.0} TFLOP/s = {:.2} of bf16", tflops / bf16);
            report.row("time", &case, what, tflops.is_finite());
            report.push("timing", json!({"case": case, "median_us": us, "tflops": tflops, "of_bf16": tflops / bf16}));
            if k == 3 {
                parts(gpu, rng, report, blas, (&g, us))?;
            }
        }
    }
    Ok(())
}

/// Where a prompt GEMM's time goes: the fp16 decode of Q, cuBLASLt's GEMM alone, and the rest (the Hadamard steps).
fn parts(
    gpu: &Gpu,
    rng: &mut SplitMix64,
    report: &mut Report,
    blas: &mut Blas<'_>,
    (g, full_us): (&GpuExl3<'_>, f64),
) -> Result<(), Error> {
    let (in_p, out_p) = (g.in_p, g.out_p);
    let mut q = gpu.pool().take(in_p * out_p * 2)?;
    let xh: Vec<u16> = acts(rng, PROMPT_ROWS * in_p).into_iter().map(f32_to_f16_bits).collect();
    let xh = gpu.upload(&xh)?;
    let mut yq = gpu.pool().take(PROMPT_ROWS * out_p * 4)?;
    let med = |f: &mut dyn FnMut(&Gpu) -> Result<(), Error>| -> Result<f64, Error> {
        let ms = (0..SAMPLES.min(11)).map(|_| gpu.time_ms(&mut *f)).collect::<Result<Vec<f32>, Error>>()?;
        Ok(f64::from(median(&ms)) * 1e3)
    };
    let dec = med(&mut |gpu| g.decode_frag(gpu, &mut q))?;
    let dims = (PROMPT_ROWS, out_p, in_p);
    let mm = med(&mut |_| blas.gemm(Gemm::F16F32, xh.dev(), q.dev(), yq.dev_mut(), dims))?;
    let tflops = 2.0 * (PROMPT_ROWS * in_p * out_p) as f64 / (mm * 1e-6) / 1e12;
    let case = format!("exl3 forward_gemm parts {PROMPT_ROWS}×{in_p}→{out_p} K={}", g.k);
    let what = format!(
        "decode {dec:.1} µs, GEMM alone {mm:.1} µs ({tflops:.0} TFLOP/s), the rest {:.1} µs",
        full_us - dec - mm
    );
    report.row("time", &case, what, mm.is_finite());
    report.push("timing", json!({"case": case, "decode_us": dec, "gemm_us": mm, "gemm_tflops": tflops}));
    Ok(())
}
