//! `rms_norm`: RMSNorm of bf16 rows bit-exact to `tf_core::ops::rms_norm_bf16` (its sequential sum of squares).

use super::{In, Out, bytes, grid1, int, need};
use crate::cuda::kernels::NORM;
use crate::linear::Norm;
use cudarc::driver::PushKernelArg;
use tf_core::ops::SumOrder;
use tf_cuda::error::DriverResultExt;
use tf_cuda::ops::{RmsNormKernel, rms_norm_rows};
use tf_cuda::{Error, Gpu};

/// Threads that stage and write a row: enough that a 5120-wide row takes one or two loads per thread.
pub(super) const THREADS: u32 = 512;

/// y bf16 [rows, dim] = RMSNorm of x bf16 [rows, dim] with weight w bf16 [dim], by tf-cuda's one RMSNorm launcher; with `codes`, also its FP8 codes in the same launch (`rms_norm_quant`, bit for bit act_quant_fp8's).
#[allow(clippy::too_many_arguments)]
pub fn rms_norm(
    gpu: &Gpu,
    x: &In<'_>,
    w: &In<'_>,
    y: &mut Out<'_>,
    codes: Option<Codes<'_>>,
    rows: usize,
    dim: usize,
    norm: Norm,
) -> Result<(), Error> {
    let wide = i32::from(norm.sums == SumOrder::Lanes32);
    let Some(codes) = codes else {
        let kernel = RmsNormKernel {
            op: "rms_norm",
            spec: NORM.spec(&[]),
            entry: "rms_norm_seq",
            threads: THREADS,
            wide: Some(wide),
        };
        return rms_norm_rows(gpu, &kernel, x, w, y, rows, dim, norm.eps);
    };
    rms_norm_quant(gpu, (x, w, y), codes, (rows, dim), norm.eps, wide)
}

/// Where a norm also writes its output's FP8 codes `[rows, dim]` and f32 scales `[rows, dim / 32]` (act_quant_fp8's bits).
pub struct Codes<'b> {
    pub codes: Out<'b>,
    pub scales: Out<'b>,
}

/// Fails naming `op` unless `dim` splits into whole 32-groups and the code buffers hold `rows` rows of them.
pub(super) fn check_codes(op: &'static str, c: &Codes<'_>, rows: usize, dim: usize) -> Result<(), Error> {
    if !dim.is_multiple_of(32) {
        let what = format!("dim {dim} is not a multiple of 32: its rows cannot be quantized in 32-groups");
        return Err(Error::Launch { op, what });
    }
    need(op, "codes", c.codes.len(), bytes(op, &[rows, dim])?)?;
    need(op, "scales", c.scales.len(), bytes(op, &[rows, dim / 32, 4])?)
}

/// [`rms_norm`]'s launch with codes: the shape checks of `rms_norm_rows` and the code buffers'.
fn rms_norm_quant(
    gpu: &Gpu,
    (x, w, y): (&In<'_>, &In<'_>, &mut Out<'_>),
    mut codes: Codes<'_>,
    (rows, dim): (usize, usize),
    eps: f32,
    wide: i32,
) -> Result<(), Error> {
    const OP: &str = "rms_norm_quant";
    check_codes(OP, &codes, rows, dim)?;
    need(OP, "x", x.len(), bytes(OP, &[rows, dim, 2])?)?;
    need(OP, "w", w.len(), bytes(OP, &[dim, 2])?)?;
    need(OP, "y", y.len(), bytes(OP, &[rows, dim, 2])?)?;
    if rows == 0 || dim == 0 {
        return Ok(());
    }
    int(OP, "rows", rows)?;
    let dim_i = int(OP, "dim", dim)?;
    let f = gpu.function(&NORM.spec(&[]), OP)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(w).arg(y).arg(&mut codes.codes).arg(&mut codes.scales).arg(&dim_i).arg(&eps).arg(&wide);
    // SAFETY: arguments match `rms_norm_quant(const u16*, const u16*, u16*, u8*, f32*, int, float, int)`; sizes checked above.
    unsafe { launch.launch(grid1(rows, THREADS)) }.doing(|| format!("launching {OP} on {rows} rows × {dim}"))?;
    Ok(())
}
