//! `act_quant_fp8` and `fp8_gemv` on the GPU against `quant_fp8_pow2` and `qgemm_f32`, then timed against the copy bandwidth.

use crate::device;
use serde_json::json;
use tf_core::formats::{e8m0_to_f32, quant_fp8_pow2, to_bf16};
use tf_core::ops::{Fp8Weight, QuantActs, qgemm_f32};
use tf_core::rng::SplitMix64;
use tf_core::{DType, Tensor, bf16};
use tf_cuda::ops::{self, Fp8Decode, Fp8Kernel, WeightScale};
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu, PoolBuf};

/// (rows, out, in): decode rows against model-sized weights (V4.1-Flash's kv and wo_b among them), and a ragged case (out not a multiple of 32, K under a chunk).
const SHAPES: [(usize, usize, usize); 6] =
    [(1, 4096, 4096), (4, 7168, 2048), (8, 5120, 2304), (3, 100, 160), (1, 512, 5120), (2, 5120, 8192)];
/// Declared before measuring: 0, as exact E4M3 products go through qgemm_f32's eight-lane tree, `(p·sx)·sw` and K-order sum.
const TOLERANCE_ABS: f32 = 0.0;

/// One problem: bf16 activations, E4M3 weight codes (no NaN codes) and E8M0 scales near 1.
pub(crate) struct Problem {
    pub(crate) rows: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) x: Vec<bf16>,
    pub(crate) w: Vec<u8>,
    pub(crate) ws: Vec<u8>,
}

impl Problem {
    pub(crate) fn random(rng: &mut SplitMix64, (rows, n, k): (usize, usize, usize)) -> Problem {
        let mut x = Vec::with_capacity(rows * k);
        for i in 0..rows * k / 32 {
            // Groups of zeros (the amax floor), tiny values (subnormal codes) and a wide range of magnitudes.
            let scale = match i % 11 {
                0 => 0.0,
                1 => 1e-7,
                _ => (2.0f32).powi((rng.next_u64() % 24) as i32 - 12),
            };
            x.extend((0..32).map(|_| bf16::from_f32(rng.normal() * scale)));
        }
        let w = (0..n * k)
            .map(|_| {
                let c = rng.next_u64() as u8;
                if c & 0x7F == 0x7F { c ^ 1 } else { c }
            })
            .collect();
        let ws = (0..n.div_ceil(32) * (k / 32)).map(|_| 116 + (rng.next_u64() % 20) as u8).collect();
        Problem { rows, n, k, x, w, ws }
    }

    pub(crate) fn shape(&self) -> String {
        format!("{}×{}×{}", self.rows, self.n, self.k)
    }

    /// Bytes the GEMV reads for `rows` rows: weight codes, weight scales, activation codes and activation scales.
    fn bytes_read(&self, rows: usize) -> usize {
        self.n * self.k + self.ws.len() + rows * self.k + rows * (self.k / 32) * 4
    }
}

/// Device buffers of a problem, activations already quantized on the GPU.
struct OnGpu<'g> {
    w: PoolBuf<'g>,
    ws: PoolBuf<'g>,
    ws_f32: PoolBuf<'g>,
    codes: PoolBuf<'g>,
    scales: PoolBuf<'g>,
}

fn gemv_with(
    gpu: &Gpu,
    p: &Problem,
    d: &OnGpu<'_>,
    rows: usize,
    kind: WeightScale,
    decode: Fp8Decode,
    kernel: Fp8Kernel,
) -> Result<Vec<f32>, Error> {
    let mut y = gpu.upload(&vec![f32::NAN; rows * p.n])?;
    let ws = if kind == WeightScale::F32 { &d.ws_f32 } else { &d.ws };
    ops::fp8_gemv_with(gpu, &d.w, ws, kind, &d.codes, &d.scales, &mut y, (rows, p.n, p.k), decode, kernel)?;
    gpu.download(&y)
}

/// The kernels timed side by side: the pipelined baseline first, then split-K and the wide shapes that fit K (docs/perf-notes.md).
fn kernels_for(rows: usize, k: usize) -> Vec<Fp8Kernel> {
    let split = |outs, unroll| Fp8Kernel::Split { outs, unroll, warps: 4 };
    let mut all = vec![Fp8Kernel::Pipelined, split(1, 4), split(2, 2)];
    let fits = |outs: &usize| ops::fp8_wide_smem_bytes(rows, *outs, k) <= ops::FP8_WIDE_SMEM;
    all.extend([2, 4, 8].into_iter().filter(fits).map(|outs| Fp8Kernel::Wide { outs }));
    // Four outputs per warp spill at 4+ rows (ptxas: 255 registers), so only for 1-2.
    if rows <= 2 {
        all.push(split(4, 1));
    }
    all
}

/// Max |a−b|, ‖a−b‖₂/‖b‖₂, differing elements and NaNs of `got` against `want`.
fn compare(got: &[f32], want: &[f32]) -> (f32, f64, usize, usize) {
    let (mut max, mut diff2, mut ref2, mut differ, mut nan) = (0.0f32, 0.0f64, 0.0f64, 0, 0);
    for (&g, &w) in got.iter().zip(want) {
        if g.is_nan() || w.is_nan() {
            nan += 1;
            continue;
        }
        let d = (g - w).abs();
        max = max.max(d);
        diff2 += f64::from(d) * f64::from(d);
        ref2 += f64::from(w) * f64::from(w);
        differ += usize::from(g.to_bits() != w.to_bits());
    }
    (max, (diff2 / ref2.max(f64::MIN_POSITIVE)).sqrt(), differ, nan + got.len().abs_diff(want.len()))
}

/// Every shape: quantized activations bit for bit, the GEMV against qgemm_f32, its variants and a row alone; then timing.
pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    for shape in SHAPES {
        let p = Problem::random(rng, shape);
        let case = p.shape();
        let q = quant_fp8_pow2(&p.x, 32);
        let wt = Tensor::from_bytes(DType::F8E4M3, &[p.n, p.k], &p.w).map_err(core_err)?;
        let st = Tensor::from_bytes(DType::F8E8M0, &[p.n.div_ceil(32), p.k / 32], &p.ws).map_err(core_err)?;
        let weight = Fp8Weight::from_tensors("check", &wt, &st).map_err(core_err)?;
        let want = qgemm_f32(&weight, &QuantActs::new(&p.x, p.rows, p.k));
        let xd = gpu.upload(&p.x)?;
        let mut codes = gpu.upload(&vec![0xFFu8; p.rows * p.k])?;
        let mut scales = gpu.upload(&vec![f32::NAN; p.rows * p.k / 32])?;
        ops::act_quant_fp8(gpu, &xd, &mut codes, &mut scales, p.rows, p.k)?;
        let (gc, gs): (Vec<u8>, Vec<u32>) = (gpu.download(&codes)?, gpu.download(&scales)?);
        let code_diff = gc.iter().zip(&q.codes).filter(|(a, b)| a != b).count();
        let scale_diff = gs.iter().zip(&q.scales).filter(|(a, b)| **a != b.to_bits()).count();
        let ok = code_diff == 0 && scale_diff == 0;
        report.row("act_quant_fp8", case.as_str(), format!("{code_diff} codes, {scale_diff} scales differ"), ok);
        let ws_f32: Vec<f32> = p.ws.iter().map(|&b| e8m0_to_f32(b)).collect();
        let d = OnGpu { w: gpu.upload(&p.w)?, ws: gpu.upload(&p.ws)?, ws_f32: gpu.upload(&ws_f32)?, codes, scales };
        let got = gemv_with(gpu, &p, &d, p.rows, WeightScale::E8m0, Fp8Decode::Hardware, Fp8Kernel::Pipelined)?;
        let (max_abs, rel, differ, nan) = compare(&got, &want);
        let exact = differ == 0 && nan == 0;
        let pass = nan == 0 && max_abs <= TOLERANCE_ABS;
        let result = format!("max |Δ| {max_abs:e}, ‖Δ‖/‖ref‖ {rel:e}, {differ}/{} differ, {nan} NaN", want.len());
        report.row("fp8_gemv", case.as_str(), result, pass);
        let bits = gemv_with(gpu, &p, &d, p.rows, WeightScale::E8m0, Fp8Decode::Bits, Fp8Kernel::Pipelined)? == got;
        let f32s = gemv_with(gpu, &p, &d, p.rows, WeightScale::F32, Fp8Decode::Hardware, Fp8Kernel::Pipelined)? == got;
        let alone = p.rows == 1
            || gemv_with(gpu, &p, &d, 1, WeightScale::E8m0, Fp8Decode::Hardware, Fp8Kernel::Pipelined)?[..]
                == got[..p.n];
        let same = format!("bit-identical: bits decode {bits}, f32 scales {f32s}, row 0 alone {alone}");
        report.row("fp8_gemv variants", case.as_str(), same, bits && f32s && alone);
        let mut split_ok = serde_json::Map::new();
        for kernel in kernels_for(p.rows, p.k).into_iter().skip(1) {
            let e8 = WeightScale::E8m0;
            let got_k = gemv_with(gpu, &p, &d, p.rows, e8, Fp8Decode::Hardware, kernel)?;
            let (_, _, differ_k, nan_k) = compare(&got_k, &want);
            let alone_k =
                p.rows == 1 || gemv_with(gpu, &p, &d, 1, e8, Fp8Decode::Hardware, kernel)?[..] == got_k[..p.n];
            // The other decode and scale paths of the split kernel, once per shape, must give the same bits.
            let bits_k = gemv_with(gpu, &p, &d, p.rows, WeightScale::F32, Fp8Decode::Bits, kernel)? == got_k;
            let result =
                format!("{differ_k}/{} differ, {nan_k} NaN; row 0 alone {alone_k}, bits+f32 {bits_k}", want.len());
            let ok = differ_k == 0 && nan_k == 0 && alone_k && bits_k;
            report.row("fp8_gemv kernels", format!("{case} {}", kernel.label()), result, ok);
            if matches!(kernel, Fp8Kernel::Wide { .. } | Fp8Kernel::Split { .. }) {
                // The bf16 output of the same launch: each sum rounded as tf_core's to_bf16.
                let mut yb = gpu.upload(&vec![0xFFFFu16; p.rows * p.n])?;
                let dims = (p.rows, p.n, p.k);
                ops::fp8_gemv_bf16(gpu, &d.w, (&d.ws, e8), &d.codes, &d.scales, &mut yb, dims, kernel)?;
                let got_b: Vec<u16> = gpu.download(&yb)?;
                let bad = got_b.iter().zip(&want).filter(|&(g, w)| *g != to_bf16(*w).to_bits()).count();
                let row = format!("{case} {}", kernel.label());
                report.row("fp8_gemv bf16 out", row, format!("{bad}/{} differ from to_bf16", want.len()), bad == 0);
            }
            split_ok.insert(kernel.label(), json!(ok));
        }
        let mut entry = json!({
            "rows": p.rows, "out": p.n, "in": p.k, "act_codes_differ": code_diff, "act_scales_differ": scale_diff,
            "max_abs_diff": max_abs, "rel_l2_err": rel, "differing": differ, "nan": nan, "bit_exact": exact,
            "tolerance_abs": TOLERANCE_ABS, "pass": pass, "bits_decode_identical": bits, "f32_scales_identical": f32s,
            "row0_alone_identical": alone, "split_variants_exact": split_ok,
        });
        if p.n >= 512 {
            let timing = time(gpu, &p, &d, copy_gbps, report)?;
            entry["timing"] = timing;
        }
        report.push("fp8_gemv", entry);
        drop((xd, d));
        gpu.pool().release_free()?;
    }
    Ok(())
}

/// Rows each weight shape is timed at (the activations for them are random codes, made on the host).
const TIME_ROWS: [usize; 3] = [1, 4, 8];

/// Cold-L2 median of every kernel at 1, 4 and 8 rows, and of the activation quantization; bytes read over copy bandwidth.
fn time(
    gpu: &Gpu,
    p: &Problem,
    d: &OnGpu<'_>,
    copy_gbps: f64,
    report: &mut Report,
) -> Result<serde_json::Value, Error> {
    let copies = device::copies_for(p.n * p.k);
    let ws = device::replicate(gpu, &d.w, copies)?;
    let max_rows = TIME_ROWS[TIME_ROWS.len() - 1];
    // Timing activations: random finite codes and power-of-two scales (values do not change the work).
    let mut rng = SplitMix64::new(p.n as u64 * 31 + p.k as u64);
    let codes: Vec<u8> = (0..max_rows * p.k).map(|_| (rng.next_u64() as u8) & 0xF7).collect();
    let scales: Vec<f32> = (0..max_rows * p.k / 32).map(|_| (2.0f32).powi((rng.next_u64() % 16) as i32 - 8)).collect();
    let (codes, scales) = (gpu.upload(&codes)?, gpu.upload(&scales)?);
    let mut y = gpu.pool().take(max_rows * p.n * 4)?;
    let mut out = Vec::new();
    for rows in TIME_ROWS {
        let bytes = p.bytes_read(rows);
        let runs = kernels_for(rows, p.k).into_iter().map(|k| (k, Fp8Decode::Hardware));
        for (kernel, decode) in runs.chain([(Fp8Kernel::Pipelined, Fp8Decode::Bits)]) {
            let shape = (rows, p.n, p.k);
            let t = device::cold_median_ms(gpu, copies, 30.max(copies), |g, i| {
                let e8 = WeightScale::E8m0;
                ops::fp8_gemv_with(g, &ws[i], &d.ws, e8, &codes, &scales, &mut y, shape, decode, kernel)
            })?;
            let gbps = bytes as f64 / (f64::from(t) * 1e-3) / 1e9;
            let ratio = gbps / copy_gbps;
            let label = format!("{}{}", kernel.label(), if decode == Fp8Decode::Bits { " bits" } else { "" });
            let result = format!("{:6.1} µs {gbps:5.0} GB/s {ratio:.2} of copy", t * 1e3);
            report.row("fp8_gemv time", format!("{label:<16} {rows}×{}×{}", p.n, p.k), result, true);
            out.push(json!({"kernel": label, "rows": rows, "out": p.n, "in": p.k, "median_us": t * 1e3,
                "gbps": gbps, "of_copy": ratio, "bytes_read": bytes}));
        }
    }
    drop(ws);
    let xd = gpu.upload(&p.x)?;
    let (mut codes, mut scales) = (gpu.pool().take(p.rows * p.k)?, gpu.pool().take(p.rows * p.k / 8)?);
    let t =
        device::cold_median_ms(gpu, 2, 30, |g, _| ops::act_quant_fp8(g, &xd, &mut codes, &mut scales, p.rows, p.k))?;
    report.row("act_quant_fp8 time", p.shape(), format!("{:.2} µs (input in L2)", t * 1e3), true);
    Ok(json!({"kernels": out, "act_quant_us": t * 1e3}))
}

fn core_err(e: tf_core::Error) -> Error {
    Error::Launch { op: "fp8 check data", what: e.to_string() }
}
