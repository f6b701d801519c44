//! `fp8_gemm` (the tiled prompt kernel) against `qgemm_f32` and the GEMV bit for bit, then timed against the GEMV at prompt rows.

use crate::device;
use crate::fp8::Problem;
use serde_json::json;
use tf_core::formats::e8m0_to_f32;
use tf_core::ops::{Fp8Weight, QuantActs, qgemm_f32};
use tf_core::rng::SplitMix64;
use tf_core::{DType, Tensor};
use tf_cuda::ops::{self, Fp8Decode, Fp8Kernel, WeightScale};
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu, PoolBuf};

/// (rows, out, in): whole tiles, ragged rows and outputs (out not a multiple of 32), one row, and model shapes.
const SHAPES: [(usize, usize, usize); 4] = [(64, 256, 512), (100, 300, 1056), (1, 100, 160), (130, 2304, 5120)];
/// Rows timed (where the tiled kernel starts to win, and prompt chunks): the GEMV runs rows / 8 launches.
const TIME_SHAPES: [(usize, usize, usize); 4] =
    [(16, 4096, 4096), (64, 4096, 4096), (2048, 4096, 4096), (2048, 2304, 5120)];

/// `fp8_gemv_with` into a NaN-poisoned output, downloaded.
fn run(
    gpu: &Gpu,
    (w, ws, kind): (&PoolBuf<'_>, &PoolBuf<'_>, WeightScale),
    (codes, scales): (&PoolBuf<'_>, &PoolBuf<'_>),
    shape: (usize, usize, usize),
    kernel: Fp8Kernel,
) -> Result<Vec<f32>, Error> {
    let mut y = gpu.upload(&vec![f32::NAN; shape.0 * shape.1])?;
    ops::fp8_gemv_with(gpu, w, ws, kind, codes, scales, &mut y, shape, Fp8Decode::Hardware, kernel)?;
    gpu.download(&y)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every shape: the tiled kernel equals qgemm_f32 and the pipelined GEMV bit for bit, with E8M0 and f32 weight scales.
pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    for shape in SHAPES {
        let p = Problem::random(rng, shape);
        let case = p.shape();
        let wt = Tensor::from_bytes(DType::F8E4M3, &[p.n, p.k], &p.w).map_err(core_err)?;
        let st = Tensor::from_bytes(DType::F8E8M0, &[p.n.div_ceil(32), p.k / 32], &p.ws).map_err(core_err)?;
        let weight = Fp8Weight::from_tensors("check", &wt, &st).map_err(core_err)?;
        let want = qgemm_f32(&weight, &QuantActs::new(&p.x, p.rows, p.k));
        let xd = gpu.upload(&p.x)?;
        let (mut codes, mut scales) = (gpu.pool().take(p.rows * p.k)?, gpu.pool().take(p.rows * p.k / 8)?);
        ops::act_quant_fp8(gpu, &xd, &mut codes, &mut scales, p.rows, p.k)?;
        let ws_f32: Vec<f32> = p.ws.iter().map(|&b| e8m0_to_f32(b)).collect();
        let (w, ws, wsf) = (gpu.upload(&p.w)?, gpu.upload(&p.ws)?, gpu.upload(&ws_f32)?);
        let acts = (&codes, &scales);
        let tiled = run(gpu, (&w, &ws, WeightScale::E8m0), acts, shape, Fp8Kernel::Tiled)?;
        let tiled_f32 = run(gpu, (&w, &wsf, WeightScale::F32), acts, shape, Fp8Kernel::Tiled)?;
        let gemv = run(gpu, (&w, &ws, WeightScale::E8m0), acts, shape, Fp8Kernel::Pipelined)?;
        let differ = tiled.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        let nan = tiled.iter().filter(|v| v.is_nan()).count();
        let (same_gemv, same_f32) = (bits(&tiled) == bits(&gemv), bits(&tiled_f32) == bits(&tiled));
        let result = format!(
            "{differ}/{} differ from qgemm_f32, {nan} NaN; == fp8_gemv {same_gemv}, f32 scales {same_f32}",
            want.len()
        );
        let ok = differ == 0 && nan == 0 && same_gemv && same_f32;
        report.row("fp8_gemm", case.as_str(), result, ok);
        report.push(
            "fp8_gemm",
            json!({"rows": p.rows, "out": p.n, "in": p.k, "differing": differ, "nan": nan,
            "same_as_gemv": same_gemv, "f32_scales_same": same_f32, "pass": ok}),
        );
        drop((xd, codes, scales, w, ws, wsf));
        gpu.pool().release_free()?;
    }
    for shape in TIME_SHAPES {
        time(gpu, rng, shape, copy_gbps, report)?;
    }
    Ok(())
}

/// Cold-L2 medians of the tiled kernel and the 8-row GEMV launches at prompt rows: µs, TFLOP/s and weight bytes over copy.
fn time(
    gpu: &Gpu,
    rng: &mut SplitMix64,
    (rows, n, k): (usize, usize, usize),
    copy_gbps: f64,
    report: &mut Report,
) -> Result<(), Error> {
    let w: Vec<u8> = (0..n * k).map(|_| (rng.next_u64() as u8) & 0xF7).collect();
    let ws: Vec<u8> = (0..n.div_ceil(32) * (k / 32)).map(|_| 120 + (rng.next_u64() % 8) as u8).collect();
    let codes: Vec<u8> = (0..rows * k).map(|_| (rng.next_u64() as u8) & 0xF7).collect();
    let scales: Vec<f32> = (0..rows * k / 32).map(|_| (2.0f32).powi((rng.next_u64() % 16) as i32 - 8)).collect();
    let (wd, wsd, cd, sd) = (gpu.upload(&w)?, gpu.upload(&ws)?, gpu.upload(&codes)?, gpu.upload(&scales)?);
    let copies = device::copies_for(n * k);
    let wc = device::replicate(gpu, &wd, copies)?;
    let mut y = gpu.pool().take(rows * n * 4)?;
    let flop = 2.0 * (rows * n * k) as f64;
    let mut us = Vec::new();
    for kernel in [Fp8Kernel::Tiled, Fp8Kernel::Pipelined] {
        let t = device::cold_median_ms(gpu, copies, 10, |g, i| {
            let e8 = WeightScale::E8m0;
            ops::fp8_gemv_with(g, &wc[i], &wsd, e8, &cd, &sd, &mut y, (rows, n, k), Fp8Decode::Hardware, kernel)
        })?;
        let tflops = flop / (f64::from(t) * 1e-3) / 1e12;
        let of_copy = (n * k) as f64 / (f64::from(t) * 1e-3) / 1e9 / copy_gbps;
        let result = format!("{:8.1} µs, {tflops:.2} TFLOP/s, weight bytes at {of_copy:.3} of copy", t * 1e3);
        report.row("fp8_gemm time", format!("{:<9} {rows}×{n}×{k}", kernel.label()), result, t.is_finite());
        us.push(f64::from(t) * 1e3);
    }
    report.push(
        "fp8_gemm_time",
        json!({"rows": rows, "out": n, "in": k, "tiled_us": us[0], "gemv_us": us[1],
        "speedup": us[1] / us[0]}),
    );
    Ok(())
}

fn core_err(e: tf_core::Error) -> Error {
    Error::Launch { op: "fp8 gemm check data", what: e.to_string() }
}
