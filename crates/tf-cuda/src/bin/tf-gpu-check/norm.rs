//! `rmsnorm_bf16` on the GPU against `tf_core::ops::rms_norm_bf16`, plus the graph, pool and batch-invariance facts it shows.

use crate::device;
use serde_json::json;
use tf_core::bf16;
use tf_core::ops::rms_norm_bf16;
use tf_core::rng::SplitMix64;
use tf_cuda::error::DriverResultExt;
use tf_cuda::report::{Report, median};
use tf_cuda::{Error, Gpu, ops};

/// Shapes (rows, dim): model widths, a ragged width, and a batch of 64.
const SHAPES: [(usize, usize); 5] = [(1, 5120), (7, 4096), (64, 7168), (3, 1000), (2, 7)];
const EPS: f32 = 1e-6;
/// Declared before measuring: only the f32 sum-of-squares order differs from the CPU, so an output moves ≤ 1 bf16 ulp.
const MAX_ULPS: u32 = 1;
const BF16_POISON: bf16 = bf16::from_bits(0xFFFF);

/// Random nonzero bf16 rows whose magnitudes vary by row (2^-8 .. 2^8), and norm weights near one.
fn inputs(rng: &mut SplitMix64, rows: usize, dim: usize) -> (Vec<bf16>, Vec<bf16>) {
    let nonzero = |v: f32, floor: f32| if v.abs() < floor { floor.copysign(v) } else { v };
    let mut x = Vec::with_capacity(rows * dim);
    for _ in 0..rows {
        let scale = (2.0f32).powi((rng.next_u64() % 17) as i32 - 8);
        x.extend((0..dim).map(|_| bf16::from_f32(nonzero(rng.normal(), 1e-3) * scale)));
    }
    let w = (0..dim).map(|_| bf16::from_f32(nonzero(1.0 + 0.25 * rng.normal(), 1e-2))).collect();
    (x, w)
}

/// Distance in bf16 ulps along the number line (±0 are equal); `None` when either is NaN.
pub fn bf16_ulps(a: bf16, b: bf16) -> Option<u32> {
    if a.is_nan() || b.is_nan() {
        return None;
    }
    let ordered = |v: bf16| {
        let bits = i32::from(v.to_bits());
        if bits & 0x8000 != 0 { -(bits & 0x7FFF) } else { bits }
    };
    Some(ordered(a).abs_diff(ordered(b)))
}

fn cpu(x: &[bf16], w: &[bf16], rows: usize, dim: usize) -> Vec<bf16> {
    let mut y = vec![bf16::ZERO; rows * dim];
    for (xr, yr) in x.chunks_exact(dim).zip(y.chunks_exact_mut(dim)) {
        rms_norm_bf16(xr, w, EPS, yr);
    }
    y
}

/// The GPU's rows for `x` (output poisoned with NaN first, so an unwritten element fails).
fn gpu_rows(gpu: &Gpu, x: &[bf16], w: &[bf16], rows: usize, dim: usize) -> Result<Vec<bf16>, Error> {
    let (xd, wd) = (gpu.upload(x)?, gpu.upload(w)?);
    let mut yd = gpu.upload(&vec![BF16_POISON; rows * dim])?;
    ops::rmsnorm_bf16(gpu, &xd, &wd, &mut yd, rows, dim, EPS)?;
    gpu.download(&yd)
}

/// Max ulps, count of differing elements and NaNs of `got` against `want`.
fn compare(got: &[bf16], want: &[bf16]) -> (u32, usize, usize) {
    let (mut max, mut differ, mut nan) = (0, 0, 0);
    for (&g, &w) in got.iter().zip(want) {
        match bf16_ulps(g, w) {
            None => nan += 1,
            Some(u) => {
                max = max.max(u);
                differ += usize::from(u > 0);
            }
        }
    }
    (max, differ, nan + want.len().abs_diff(got.len()))
}

/// Every shape against the CPU, then row 0 of the largest batch alone, then the pool staying warm.
pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    for pass in 0..2 {
        let warm = gpu.pool().stats().allocations;
        for &(rows, dim) in &SHAPES {
            let (x, w) = inputs(rng, rows, dim);
            let got = gpu_rows(gpu, &x, &w, rows, dim)?;
            let want = cpu(&x, &w, rows, dim);
            let (max, differ, nan) = compare(&got, &want);
            let ok = nan == 0 && max <= MAX_ULPS;
            if pass == 0 {
                let exact = differ == 0 && nan == 0;
                let result = format!("max {max} ulp, {differ}/{} differ, {nan} NaN, bit-exact {exact}", want.len());
                report.row("rmsnorm_bf16", format!("{rows}×{dim}"), result, ok);
                report.push(
                    "rmsnorm",
                    json!({"rows": rows, "dim": dim, "max_ulps": max, "differing": differ, "nan": nan,
                           "bit_exact": exact, "tolerance_ulps": MAX_ULPS, "pass": ok}),
                );
                if rows > 1 {
                    let alone = gpu_rows(gpu, &x[..dim], &w, 1, dim)?;
                    let same = alone == got[..dim];
                    report.row(
                        "rmsnorm_bf16",
                        format!("row 0 of {rows}×{dim} alone"),
                        format!("bit-identical {same}"),
                        same,
                    );
                }
            } else if !ok {
                report.row(
                    "rmsnorm_bf16",
                    format!("{rows}×{dim} second pass"),
                    format!("max {max} ulp, {nan} NaN"),
                    false,
                );
            }
        }
        if pass == 1 {
            let fresh = gpu.pool().stats().allocations - warm;
            report.row("device pool", "second pass, same shapes", format!("{fresh} new cudaMallocs"), fresh == 0);
        }
    }
    timing(gpu, rng, report, copy_gbps)?;
    graph(gpu, rng, report)
}

/// Median time of the 64×7168 norm (inputs rotated so L2 is cold) and its bytes moved as a share of the copy bandwidth.
fn timing(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    let (rows, dim) = (64, 7168);
    let (x, w) = inputs(rng, rows, dim);
    let (xd, wd) = (gpu.upload(&x)?, gpu.upload(&w)?);
    let copies = device::copies_for(2 * rows * dim * 2);
    let xs = device::replicate(gpu, &xd, copies)?;
    let mut ys = (0..copies).map(|_| gpu.pool().take(rows * dim * 2)).collect::<Result<Vec<_>, _>>()?;
    let t = device::cold_median_ms(gpu, copies, 3 * copies.min(20), |g, i| {
        ops::rmsnorm_bf16(g, &xs[i], &wd, &mut ys[i], rows, dim, EPS)
    })?;
    drop((xs, ys));
    gpu.pool().release_free()?;
    let gbps = (2 * rows * dim * 2 + dim * 2) as f64 / (f64::from(t) * 1e-3) / 1e9;
    let result = format!("{:.2} µs cold L2, {gbps:.0} GB/s = {:.2} of copy", t * 1e3, gbps / copy_gbps);
    report.row("rmsnorm_bf16 time", format!("{rows}×{dim}"), result, true);
    report.set(
        "rmsnorm_time",
        json!({"rows": rows, "dim": dim, "median_us": t * 1e3, "gbps": gbps, "of_copy": gbps / copy_gbps}),
    );
    Ok(())
}

/// A captured graph of 100 norms replays to the same bits as direct launches; launch costs compared.
fn graph(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let (rows, dim, n) = (7, 4096, 100);
    let (x, w) = inputs(rng, rows, dim);
    let direct = gpu_rows(gpu, &x, &w, rows, dim)?;
    let (xd, wd) = (gpu.upload(&x)?, gpu.upload(&w)?);
    let mut yd = gpu.upload(&vec![BF16_POISON; rows * dim])?;
    let many = |g: &Gpu, y: &mut tf_cuda::PoolBuf<'_>| {
        (0..n).try_for_each(|_| ops::rmsnorm_bf16(g, &xd, &wd, y, rows, dim, EPS))
    };
    let graph = gpu.capture(|g| many(g, &mut yd))?;
    let launch = |_: &Gpu| graph.launch().doing(|| "replaying a captured graph".into());
    launch(gpu)?;
    let replayed: Vec<bf16> = gpu.download(&yd)?;
    let same = replayed == direct;
    report.row(
        "cuda graph",
        format!("{n}× rmsnorm {rows}×{dim}"),
        format!("replay bit-identical to direct {same}"),
        same,
    );
    let (mut direct_ms, mut graph_ms) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        direct_ms.push(gpu.time_ms(|g| many(g, &mut yd))?);
        graph_ms.push(gpu.time_ms(launch)?);
    }
    let (d, g) = (median(&direct_ms) * 1e3 / n as f32, median(&graph_ms) * 1e3 / n as f32);
    report.row("cuda graph", "per-kernel time", format!("direct {d:.2} µs, graph {g:.2} µs"), true);
    report.set(
        "graph",
        json!({"kernels": n, "bit_identical": same, "direct_us_per_kernel": d, "graph_us_per_kernel": g}),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulps_follow_the_number_line() {
        let b = |x: f32| bf16::from_f32(x);
        assert_eq!(bf16_ulps(b(1.0), b(1.0)), Some(0));
        assert_eq!(bf16_ulps(b(1.0), bf16::from_bits(b(1.0).to_bits() + 1)), Some(1));
        assert_eq!(bf16_ulps(b(0.0), b(-0.0)), Some(0));
        assert_eq!(bf16_ulps(bf16::from_bits(1), bf16::from_bits(0x8001)), Some(2), "across zero");
        assert_eq!(bf16_ulps(b(1.0), BF16_POISON), None, "NaN never passes");
        assert_eq!(compare(&[b(1.0), BF16_POISON], &[b(1.0), b(2.0)]), (0, 0, 1));
    }
}
