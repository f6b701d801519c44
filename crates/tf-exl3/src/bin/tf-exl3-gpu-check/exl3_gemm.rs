//! The EXL3 prompt GEMM (W rebuilt in fp16, cuBLASLt fp16 GEMM) against the CPU within a declared bound, and its rate at 4,096 rows.

use crate::exl3::acts;
use crate::{Report, SAMPLES};
use serde_json::json;
use tf_core::formats::{bf16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};
use tf_core::rng::SplitMix64;
use tf_cuda::blas::{Blas, Gemm, rate};
use tf_cuda::timing::median;
use tf_cuda::{Error, Gpu};
use tf_exl3::exl3::encode::random_weight;
use tf_exl3::exl3_cuda::GpuExl3;
use tf_exl3::exl3_mma::Exl3Experts;
use tf_exl3::{Codebook, Exl3Weight};

/// Declared before measuring: per output, |Δ| ≤ 2^-9 · Σ_i |x_i·W_ic| + 2^-24 · Σ_i |x_i| (W and x each rounded once to fp16, f32 sums).
const REL_GEMM: f64 = 1.0 / 512.0;
/// fp16's subnormal spacing: the most a small effective weight can move when rounded.
const ABS_W: f64 = 1.0 / 16_777_216.0;
/// Rows of the prompt GEMM target.
const PROMPT_ROWS: usize = 4096;

pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let mut blas = Blas::new(gpu)?;
    for k in 1..=8 {
        for cb in [Codebook::Inst3, Codebook::Mcg, Codebook::Mul1] {
            if k == 3 || cb == Codebook::Mul1 {
                effective(gpu, report, &random_weight(rng, (256, 384, k), cb, 1.0))?;
            }
        }
    }
    // (in_p, out_p, K, codebook, rows, inputs used, outputs kept, weight scale, bias)
    let cases = [
        (256, 384, 3, Codebook::Mul1, 40, 256, 384, 1.0, false),
        (256, 384, 5, Codebook::Inst3, 3, 200, 300, 1.0, true),
        (5120, 2304, 3, Codebook::Mul1, 64, 5120, 2304, 1.0 / 64.0, false),
        (2304, 5120, 2, Codebook::Mul1, 17, 2304, 5120, 1.0 / 512.0, true),
    ];
    for (in_p, out_p, k, cb, rows, kin, n, scale, with_bias) in cases {
        let mut w = random_weight(rng, (in_p, out_p, k), cb, scale);
        if with_bias {
            w.bias = Some(acts(rng, out_p));
        }
        effective(gpu, report, &w)?;
        gemm_case(gpu, rng, report, &mut blas, &w, (rows, kin, n))?;
    }
    routed_case(gpu, rng, report, &mut blas)?;
    timing(gpu, rng, report, &mut blas)
}

/// `routed_gemm` per token (top 6) and per pair over 12 experts of K 2–4 (some with a bias): every pair within the bound of its expert's CPU forward.
fn routed_case(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, blas: &mut Blas<'_>) -> Result<(), Error> {
    let (in_p, out_p, count, rows, topk) = (256, 384, 12, 40, 6);
    let ws: Vec<Exl3Weight> = (0..count)
        .map(|e| {
            let mut w = random_weight(rng, (in_p, out_p, 2 + e % 3), Codebook::Mul1, 1.0);
            w.bias = (e % 4 == 1).then(|| acts(rng, out_p));
            w
        })
        .collect();
    let gs = ws.iter().map(|w| GpuExl3::upload(gpu, w)).collect::<Result<Vec<_>, _>>()?;
    let table = Exl3Experts::new(gpu, &gs.iter().collect::<Vec<_>>(), 64)?;
    let (kin, n) = (200, 300);
    for per_token in [true, false] {
        let pairs = rows * topk;
        let x_rows = if per_token { rows } else { pairs };
        let ids: Vec<i32> = (0..pairs).map(|_| (rng.next_u64() % count as u64) as i32).collect();
        let xb: Vec<u16> = acts(rng, x_rows * kin).into_iter().map(f32_to_bf16_bits).collect();
        let t = if per_token { topk } else { 0 };
        let y: Vec<f32> = gpu.download(&table.routed_gemm(
            gpu,
            blas,
            &gpu.upload(&ids)?,
            &gpu.upload(&xb)?,
            (t, pairs),
            (kin, n),
        )?)?;
        let (mut over, mut worst) = (0usize, 0.0f64);
        for (p, &e) in ids.iter().enumerate() {
            let w = &ws[e as usize];
            let a = if per_token { p / topk } else { p };
            let mut x = vec![0.0f32; in_p];
            x[..kin].iter_mut().zip(&xb[a * kin..(a + 1) * kin]).for_each(|(d, &b)| *d = bf16_bits_to_f32(b));
            let (o, wo) = within(w, &x, &y[p * n..(p + 1) * n]);
            over += o;
            worst = worst.max(wo);
        }
        let mut bad = ids.clone();
        bad[3] = count as i32;
        let refused =
            table.routed_gemm(gpu, blas, &gpu.upload(&bad)?, &gpu.upload(&xb)?, (t, pairs), (kin, n)).is_err();
        let case = format!(
            "{pairs} pairs over {count} experts (K 2-4, biases) {in_p}→{out_p}, {kin}→{n}, per token {per_token}"
        );
        let what =
            format!("{over} of {} over the bound, worst {worst:.3} of it; a bad id refused {refused}", pairs * n);
        report.row("exl3 routed_gemm", &case, what, over == 0 && refused);
    }
    Ok(())
}

/// Outputs of one row over the bound of [`REL_GEMM`] against `w`'s CPU forward, and the worst error as a fraction of it.
fn within(w: &Exl3Weight, x: &[f32], y: &[f32]) -> (usize, f64) {
    let want = w.forward(x, 1);
    let weff = w.weight();
    let xsum: f64 = x.iter().map(|v| f64::from(v.abs())).sum();
    let (mut over, mut worst) = (0, 0.0f64);
    for (c, &got) in y.iter().enumerate() {
        let mag: f64 = x.iter().enumerate().map(|(i, &a)| f64::from((a * weff[i * w.out_p + c]).abs())).sum();
        let tol = REL_GEMM * mag + ABS_W * xsum + f64::from(want[c].abs()) * 1e-6;
        let err = f64::from((got - want[c]).abs());
        over += usize::from(err > tol || err.is_nan());
        worst = worst.max(err / tol);
    }
    (over, worst)
}

/// The GPU's fp16 effective weight against `Exl3Weight::weight` rounded once: bit for bit.
fn effective(gpu: &Gpu, report: &mut Report, w: &Exl3Weight) -> Result<(), Error> {
    let g = GpuExl3::upload(gpu, w)?;
    let mut buf = gpu.pool().take(w.in_p * w.out_p * 2)?;
    g.effective_f16(gpu, &mut buf)?;
    let got: Vec<u16> = gpu.download(&buf)?;
    let want: Vec<u16> = w.weight().into_iter().map(f32_to_f16_bits).collect();
    let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    let case = format!("{}×{} K={} {:?}", w.in_p, w.out_p, w.k, w.codebook);
    report.row("exl3 effective_f16", &case, format!("{differ} of {} differ", want.len()), differ == 0);
    Ok(())
}

/// `forward_gemm` on `rows` bf16 rows of `kin` inputs, `n` outputs kept, against the CPU's forward within [`REL_GEMM`].
fn gemm_case(
    gpu: &Gpu,
    rng: &mut SplitMix64,
    report: &mut Report,
    blas: &mut Blas<'_>,
    w: &Exl3Weight,
    (rows, kin, n): (usize, usize, usize),
) -> Result<(), Error> {
    let (in_p, out_p) = (w.in_p, w.out_p);
    let g = GpuExl3::upload(gpu, w)?;
    let xb: Vec<u16> = acts(rng, rows * kin).into_iter().map(f32_to_bf16_bits).collect();
    let mut x = vec![0.0f32; rows * in_p];
    for (r, row) in x.chunks_exact_mut(in_p).enumerate() {
        row[..kin].iter_mut().zip(&xb[r * kin..(r + 1) * kin]).for_each(|(d, &b)| *d = bf16_bits_to_f32(b));
    }
    let want = w.forward(&x, rows);
    let y: Vec<f32> = gpu.download(&g.forward_gemm(gpu, blas, &gpu.upload(&xb)?, rows, (kin, n))?)?;
    let weff = w.weight();
    let (mut over, mut worst) = (0usize, 0.0f64);
    for r in 0..rows {
        let xr = &x[r * in_p..(r + 1) * in_p];
        let mut mag = vec![0.0f64; out_p];
        for (i, &a) in xr.iter().enumerate().filter(|(_, a)| **a != 0.0) {
            let wr = &weff[i * out_p..(i + 1) * out_p];
            mag.iter_mut().zip(wr).for_each(|(m, &v)| *m += f64::from((a * v).abs()));
        }
        let xsum: f64 = xr.iter().map(|v| f64::from(v.abs())).sum();
        for c in 0..n {
            let (got, exp) = (y[r * n + c], want[r * out_p + c]);
            let tol = REL_GEMM * mag[c] + ABS_W * xsum + f64::from(exp.abs()) * 1e-6;
            let err = f64::from((got - exp).abs());
            over += usize::from(err > tol || err.is_nan());
            worst = worst.max(err / tol);
        }
    }
    let case = format!("{in_p}×{out_p} K={} {:?}, {rows} rows, {kin}→{n}, bias {}", w.k, w.codebook, w.bias.is_some());
    let what = format!("{over} of {} over the bound, worst {worst:.3} of it", rows * n);
    report.row("exl3 forward_gemm", &case, what, over == 0 && y.len() == rows * n);
    report.push("exl3_gemm", json!({"case": case, "over": over, "worst_of_bound": worst}));
    Ok(())
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
            let xb: Vec<u16> = acts(rng, PROMPT_ROWS * in_p).into_iter().map(f32_to_bf16_bits).collect();
            let x = gpu.upload(&xb)?;
            let dims = (in_p, out_p);
            drop(g.forward_gemm(gpu, blas, &x, PROMPT_ROWS, dims)?);
            let ms = (0..SAMPLES.min(11))
                .map(|_| gpu.time_ms(|gpu| g.forward_gemm(gpu, blas, &x, PROMPT_ROWS, dims).map(drop)))
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

/// Where a prompt GEMM's time goes: rebuilding W in fp16, cuBLASLt's GEMM alone, and the rest (x to fp16).
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
    let dec = med(&mut |gpu| g.effective_f16(gpu, &mut q))?;
    let dims = (PROMPT_ROWS, out_p, in_p);
    let mm = med(&mut |_| blas.gemm(Gemm::F16F32, xh.dev(), q.dev(), yq.dev_mut(), dims))?;
    let tflops = 2.0 * (PROMPT_ROWS * in_p * out_p) as f64 / (mm * 1e-6) / 1e12;
    let case = format!("exl3 forward_gemm parts {PROMPT_ROWS}×{in_p}→{out_p} K={}", g.k);
    let what = format!(
        "rebuild W {dec:.1} µs, GEMM alone {mm:.1} µs ({tflops:.0} TFLOP/s), the rest {:.1} µs",
        full_us - dec - mm
    );
    report.row("time", &case, what, mm.is_finite());
    report.push("timing", json!({"case": case, "rebuild_us": dec, "gemm_us": mm, "gemm_tflops": tflops}));
    Ok(())
}
