//! `rms_norm`: RMSNorm of bf16 rows bit-exact to `tf_core::ops::rms_norm_bf16` (its sequential sum of squares).

use super::{In, Out, bytes, grid, int, need};
use crate::cuda::kernels::NORM;
use crate::linear::Norm;
use cudarc::driver::PushKernelArg;
use tf_core::ops::SumOrder;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// Threads that stage and write a row: enough that a 5120-wide row takes one or two loads per thread.
const THREADS: u32 = 512;

/// y bf16 [rows, dim] = RMSNorm of x bf16 [rows, dim] with weight w bf16 [dim].
pub fn rms_norm(
    gpu: &Gpu,
    x: &In<'_>,
    w: &In<'_>,
    y: &mut Out<'_>,
    rows: usize,
    dim: usize,
    norm: Norm,
) -> Result<(), Error> {
    const OP: &str = "rms_norm";
    need(OP, "x", x.len(), bytes(OP, &[rows, dim, 2])?)?;
    need(OP, "w", w.len(), bytes(OP, &[dim, 2])?)?;
    need(OP, "y", y.len(), bytes(OP, &[rows, dim, 2])?)?;
    if rows == 0 || dim == 0 {
        return Ok(());
    }
    if rows > i32::MAX as usize {
        return Err(Error::Launch { op: OP, what: format!("{rows} rows exceed one launch") });
    }
    let f = gpu.function(&NORM.spec(&[]), "rms_norm_seq")?;
    let dim_i = int(OP, "dim", dim)?;
    let mut launch = gpu.stream().launch_builder(&f);
    let wide = i32::from(norm.sums == SumOrder::Lanes32);
    launch.arg(x).arg(w).arg(y).arg(&dim_i).arg(&norm.eps).arg(&wide);
    // SAFETY: arguments match `rms_norm_seq(const u16*, const u16*, u16*, int, float, int)`; sizes checked above.
    unsafe { launch.launch(grid((rows, 1), THREADS, 0)) }.doing(|| format!("launching {OP} on {rows} rows × {dim}"))?;
    Ok(())
}
