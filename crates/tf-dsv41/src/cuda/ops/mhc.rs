//! `hc_mixes`, `hc_pre`, `hc_post`, `hc_mean`: the mHC site (dsv41 §8) as `crate::mhc` computes it.

use super::norm::{Codes, check_codes};
use super::{In, Out, bytes, grid, grid1, int, need};
use crate::cuda::kernels::{MHC, NORM};
use crate::linear::Norm;
use cudarc::driver::PushKernelArg;
use tf_core::ops::SumOrder;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// `MHC_MAX_HC` in `kernels/mhc.cu`: the bound of its per-thread stream arrays.
const MAX_HC: usize = 8;
/// Threads per block of the column kernels.
const THREADS: usize = 256;
/// `HC_DOT_THREADS` in `kernels/mhc.cu`: threads of an `hc_dots` or `dots_bf16` block.
pub(super) const DOT_THREADS: u32 = 256;
/// Up to this many rows `hc_dots` runs a block per (output, row); past it the tiled `dense` keeps each block busier.
const DOT_ROWS: usize = 64;

/// An mHC site's Sinkhorn: its iterations and eps, and whether hc 4 takes `hc_sinkhorn_warp4` (hc fixed at compile time, the same ops).
#[derive(Clone, Copy, Debug)]
pub struct Sinkhorn {
    pub iters: usize,
    pub eps: f32,
    pub hc4: bool,
}

/// Fails naming `op` unless `1 ≤ hc ≤ MAX_HC` and `dim ≥ 1`; returns the mix width `(2+hc)·hc`.
fn shape(op: &'static str, hc: usize, dim: usize) -> Result<usize, Error> {
    if hc == 0 || hc > MAX_HC || dim == 0 {
        let what = format!("hc = {hc}, dim = {dim}: needs 1 ≤ hc ≤ {MAX_HC} and dim ≥ 1");
        return Err(Error::Launch { op, what });
    }
    Ok((2 + hc) * hc)
}

/// Blocks along a row of `dim` columns, within the grid's y limit.
fn column_blocks(op: &'static str, dim: usize) -> Result<usize, Error> {
    let blocks = dim.div_ceil(THREADS);
    if blocks > 65535 {
        return Err(Error::Launch { op, what: format!("dim = {dim} needs {blocks} column blocks, over 65535") });
    }
    Ok(blocks)
}

/// Per row: raw = x·funcᵀ (x bf16 [rows, hc·dim] as f32, func f32 [mix, hc·dim], mix=(2+hc)·hc), times 1/sqrt(mean(x²)+eps), then split_sinkhorn → mix f32 [rows, mix] laid out [pre hc | post hc | comb hc×hc row-major].
#[allow(clippy::too_many_arguments)]
pub fn hc_mixes(
    gpu: &Gpu,
    x: &In<'_>,
    func: &In<'_>,
    scale: &In<'_>,
    base: &In<'_>,
    mix: &mut Out<'_>,
    (rows, hc, dim): (usize, usize, usize),
    sinkhorn: Sinkhorn,
    norm: Norm,
) -> Result<(), Error> {
    const OP: &str = "hc_mixes";
    let Sinkhorn { iters, eps: hc_eps, hc4 } = sinkhorn;
    let eps = norm.eps;
    let n = shape(OP, hc, dim)?;
    let width = bytes(OP, &[hc, dim])?;
    need(OP, "x", x.len(), bytes(OP, &[rows, width, 2])?)?;
    need(OP, "func", func.len(), bytes(OP, &[n, width, 4])?)?;
    need(OP, "scale", scale.len(), 3 * 4)?;
    need(OP, "base", base.len(), n * 4)?;
    need(OP, "mix", mix.len(), bytes(OP, &[rows, n, 4])?)?;
    if rows == 0 {
        return Ok(());
    }
    let (rows_i, hc_i, width_i) = (int(OP, "rows", rows)?, int(OP, "hc", hc)?, int(OP, "hc·dim", width)?);
    let iters_i = int(OP, "iters", iters)?;
    // The raw dots in matmul_nt's order, as HcSite::mixes computes them on the CPU, and each row's sum of x².
    let mut ss = gpu.pool().take(bytes(OP, &[rows, 4])?)?;
    let spread = norm.sums == SumOrder::Lanes32
        && rows <= DOT_ROWS
        && width.is_multiple_of(4)
        && super::dense::aligned16(gpu, x)
        && super::dense::aligned16(gpu, func);
    let summed = if spread {
        let f = gpu.function(&MHC.spec(&[]), "hc_dots")?;
        let (mut ss_out, n_i) = (ss.view_mut(), int(OP, "mix", n)?);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(x).arg(func).arg(&mut *mix).arg(&mut ss_out).arg(&n_i).arg(&width_i);
        // SAFETY: arguments match `hc_dots(const u16*, const f32*, f32*, f32*, int, int)`; sizes and alignment checked above.
        unsafe { launch.launch(grid((n + 1, rows), DOT_THREADS, 0)) }
            .doing(|| format!("launching {OP} (dots) on {rows} rows"))?;
        true
    } else {
        super::dense::dense_squares(
            gpu,
            (x, super::Io::Bf16),
            (func, super::Io::F32),
            (&mut *mix, super::Io::F32),
            (&mut ss.view_mut(), norm.sums),
            (rows, n, width),
            super::Sum::Lanes8,
        )?
    };
    if !summed {
        let f = gpu.function(&MHC.spec(&[]), "hc_squares")?;
        let mut ss_out = ss.view_mut();
        let mut launch = gpu.stream().launch_builder(&f);
        let wide = i32::from(norm.sums == SumOrder::Lanes32);
        launch.arg(&mut ss_out).arg(x).arg(&rows_i).arg(&width_i).arg(&wide);
        // SAFETY: arguments match `hc_squares(f32*, const u16*, int, int, int)`; sizes checked above.
        unsafe { launch.launch(grid1(rows, 32)) }.doing(|| format!("launching {OP} (squares) on {rows} rows"))?;
    }
    let ss_view = ss.view();
    // hc² ≤ 32 (hc 4 in every dsv41 config): a warp per row by shuffles, same sums, no block barriers.
    let warp = hc * hc <= 32;
    let name = match (warp, hc) {
        (true, 4) if hc4 => "hc_sinkhorn_warp4",
        (true, _) => "hc_sinkhorn_warp",
        _ => "hc_sinkhorn",
    };
    let sinkhorn = gpu.function(&MHC.spec(&[]), name)?;
    let mut launch = gpu.stream().launch_builder(&sinkhorn);
    launch
        .arg(mix)
        .arg(&ss_view)
        .arg(scale)
        .arg(base)
        .arg(&rows_i)
        .arg(&hc_i)
        .arg(&width_i)
        .arg(&iters_i)
        .arg(&eps)
        .arg(&hc_eps);
    // SAFETY: arguments match `hc_sinkhorn[_warp|_warp4](f32*, const f32*, const f32*, const f32*, int, int, int, int, float, float)`; sizes checked above.
    let threads = if warp { 32 } else { (MAX_HC * MAX_HC) as u32 };
    unsafe { launch.launch(grid1(rows, threads)) }.doing(|| format!("launching {OP} (sinkhorn) on {rows} rows"))?;
    Ok(())
}

/// A collapse's checks (x `[rows, hc, dim]` bf16, mix `[rows, (2+hc)·hc]` f32, y `[rows, dim]` bf16): its hc and dim as kernel ints, `None` for no rows.
fn collapse_args(
    op: &'static str,
    (x, mix, y): (&In<'_>, &In<'_>, &Out<'_>),
    (rows, hc, dim): (usize, usize, usize),
) -> Result<Option<(i32, i32)>, Error> {
    let n = shape(op, hc, dim)?;
    need(op, "x", x.len(), bytes(op, &[rows, hc, dim, 2])?)?;
    need(op, "mix", mix.len(), bytes(op, &[rows, n, 4])?)?;
    need(op, "y", y.len(), bytes(op, &[rows, dim, 2])?)?;
    if rows == 0 {
        return Ok(None);
    }
    int(op, "rows", rows)?;
    Ok(Some((int(op, "hc", hc)?, int(op, "dim", dim)?)))
}

/// y bf16 [rows, dim] = hc_pre of each row with that row's `pre` (first hc floats of its mix).
pub fn hc_pre(
    gpu: &Gpu,
    x: &In<'_>,
    mix: &In<'_>,
    y: &mut Out<'_>,
    (rows, hc, dim): (usize, usize, usize),
) -> Result<(), Error> {
    const OP: &str = "hc_pre";
    let Some((hc_i, dim_i)) = collapse_args(OP, (x, mix, &*y), (rows, hc, dim))? else { return Ok(()) };
    let blocks = column_blocks(OP, dim)?;
    let f = gpu.function(&MHC.spec(&[]), OP)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(mix).arg(y).arg(&hc_i).arg(&dim_i);
    // SAFETY: arguments match `hc_pre(const u16*, const f32*, u16*, int, int)`; sizes checked above.
    unsafe { launch.launch(grid((rows, blocks), THREADS as u32, 0)) }
        .doing(|| format!("launching {OP} on {rows} rows"))?;
    Ok(())
}

/// y bf16 [rows, dim] = RMSNorm(hc_pre of each row) with weight w bf16 [dim], in one launch: `hc_pre` then `rms_norm`, bit for bit; with `codes`, also its FP8 codes (`hc_pre_norm_quant`).
#[allow(clippy::too_many_arguments)]
pub fn hc_pre_norm(
    gpu: &Gpu,
    x: &In<'_>,
    mix: &In<'_>,
    w: &In<'_>,
    y: &mut Out<'_>,
    codes: Option<Codes<'_>>,
    (rows, hc, dim): (usize, usize, usize),
    norm: Norm,
) -> Result<(), Error> {
    let op = if codes.is_some() { "hc_pre_norm_quant" } else { "hc_pre_norm" };
    need(op, "w", w.len(), bytes(op, &[dim, 2])?)?;
    if let Some(c) = &codes {
        check_codes(op, c, rows, dim)?;
    }
    let Some((hc_i, dim_i)) = collapse_args(op, (x, mix, &*y), (rows, hc, dim))? else { return Ok(()) };
    let wide = i32::from(norm.sums == SumOrder::Lanes32);
    let f = gpu.function(&NORM.spec(&[]), op)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(mix).arg(w).arg(y);
    let mut codes = codes;
    if let Some(c) = codes.as_mut() {
        launch.arg(&mut c.codes).arg(&mut c.scales);
    }
    launch.arg(&hc_i).arg(&dim_i).arg(&norm.eps).arg(&wide);
    // SAFETY: arguments match `hc_pre_norm(const u16*, const f32*, const u16*, u16*, [u8*, f32*,] int, int, float, int)`; sizes checked above.
    unsafe { launch.launch(grid1(rows, super::norm::THREADS)) }.doing(|| format!("launching {op} on {rows} rows"))?;
    Ok(())
}

/// out bf16 [rows, hc·dim] = hc_post(f [rows, dim] bf16, x [rows, hc·dim] bf16, mix).
pub fn hc_post(
    gpu: &Gpu,
    f: &In<'_>,
    x: &In<'_>,
    mix: &In<'_>,
    out: &mut Out<'_>,
    (rows, hc, dim): (usize, usize, usize),
) -> Result<(), Error> {
    const OP: &str = "hc_post";
    let n = shape(OP, hc, dim)?;
    need(OP, "f", f.len(), bytes(OP, &[rows, dim, 2])?)?;
    need(OP, "x", x.len(), bytes(OP, &[rows, hc, dim, 2])?)?;
    need(OP, "mix", mix.len(), bytes(OP, &[rows, n, 4])?)?;
    need(OP, "out", out.len(), bytes(OP, &[rows, hc, dim, 2])?)?;
    if rows == 0 {
        return Ok(());
    }
    let blocks = column_blocks(OP, dim)?;
    int(OP, "rows", rows)?;
    let (hc_i, dim_i) = (int(OP, "hc", hc)?, int(OP, "dim", dim)?);
    let func = gpu.function(&MHC.spec(&[]), OP)?;
    let mut launch = gpu.stream().launch_builder(&func);
    launch.arg(f).arg(x).arg(mix).arg(out).arg(&hc_i).arg(&dim_i);
    // SAFETY: arguments match `hc_post(const u16*, const u16*, const f32*, u16*, int, int)`; sizes checked above.
    unsafe { launch.launch(grid((rows, blocks), THREADS as u32, 0)) }
        .doing(|| format!("launching {OP} on {rows} rows"))?;
    Ok(())
}

/// out bf16 rows `stride` elements apart = the mean of each x row's hc streams (`Block::mean_of_streams`): DSpark's tap on the device.
pub fn hc_mean(
    gpu: &Gpu,
    x: &In<'_>,
    out: &mut Out<'_>,
    (rows, hc, dim, stride): (usize, usize, usize, usize),
) -> Result<(), Error> {
    const OP: &str = "hc_mean";
    shape(OP, hc, dim)?;
    need(OP, "x", x.len(), bytes(OP, &[rows, hc, dim, 2])?)?;
    if rows == 0 {
        return Ok(());
    }
    if stride < dim {
        return Err(Error::Launch { op: OP, what: format!("row stride {stride} under the width {dim}") });
    }
    need(OP, "out", out.len(), bytes(OP, &[(rows - 1) * stride + dim, 2])?)?;
    let blocks = column_blocks(OP, dim)?;
    int(OP, "rows", rows)?;
    let (hc_i, dim_i, stride_i) = (int(OP, "hc", hc)?, int(OP, "dim", dim)?, int(OP, "stride", stride)?);
    let f = gpu.function(&MHC.spec(&[]), OP)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(out).arg(&hc_i).arg(&dim_i).arg(&stride_i);
    // SAFETY: arguments match `hc_mean(const u16*, u16*, int, int, int)`; sizes checked above.
    unsafe { launch.launch(grid((rows, blocks), THREADS as u32, 0)) }
        .doing(|| format!("launching {OP} on {rows} rows"))?;
    Ok(())
}
