//! RMSNorm of bf16 rows, one block per row: the one launcher, for `rmsnorm_bf16` here and any crate's own norm kernel.

use crate::error::DriverResultExt;
use crate::launch::{as_i32, check_bytes, grid1};
use crate::pool::PoolBuf;
use crate::{Error, Gpu, KernelSpec, kernels};
use cudarc::driver::{CudaView, CudaViewMut, PushKernelArg};

/// Threads per row; a fixed count keeps each row's reduction tree the same whatever the batch.
pub const RMSNORM_THREADS: u32 = 256;

/// [`rms_norm_rows`] by this crate's `rmsnorm_bf16` (`RMSNORM_THREADS` threads, a fixed tree).
pub fn rmsnorm_bf16(
    gpu: &Gpu,
    x: &PoolBuf<'_>,
    w: &PoolBuf<'_>,
    y: &mut PoolBuf<'_>,
    rows: usize,
    dim: usize,
    eps: f32,
) -> Result<(), Error> {
    let threads = RMSNORM_THREADS.to_string();
    let spec = kernels::RMSNORM.spec(&[("RMSNORM_THREADS", &threads)]);
    let kernel =
        RmsNormKernel { op: "rmsnorm_bf16", spec, entry: "rmsnorm_bf16", threads: RMSNORM_THREADS, wide: None };
    rms_norm_rows(gpu, &kernel, &x.view(), &w.view(), &mut y.view_mut(), rows, dim, eps)
}

/// An RMSNorm kernel `entry(const bf16* x, const bf16* w, bf16* y, int dim, float eps[, int wide])`, `threads` per row.
pub struct RmsNormKernel<'s> {
    /// The name errors give.
    pub op: &'static str,
    pub spec: KernelSpec<'s>,
    pub entry: &'s str,
    pub threads: u32,
    /// The trailing `wide` argument, for kernels that take one.
    pub wide: Option<i32>,
}

/// `y[r] = w · x[r] / sqrt(mean(x[r]²) + eps)` for `rows` rows of `dim` bf16 values, by `kernel`.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_rows(
    gpu: &Gpu,
    kernel: &RmsNormKernel<'_>,
    x: &CudaView<'_, u8>,
    w: &CudaView<'_, u8>,
    y: &mut CudaViewMut<'_, u8>,
    rows: usize,
    dim: usize,
    eps: f32,
) -> Result<(), Error> {
    let op = kernel.op;
    let bytes = rows.checked_mul(dim).and_then(|n| n.checked_mul(2));
    let bytes = bytes.ok_or_else(|| Error::Launch { op, what: format!("{rows}×{dim} overflows") })?;
    check_bytes(op, "x", x.len(), bytes)?;
    check_bytes(op, "w", w.len(), dim.saturating_mul(2))?;
    check_bytes(op, "y", y.len(), bytes)?;
    if rows == 0 || dim == 0 {
        return Ok(());
    }
    as_i32(op, "rows", rows)?;
    let f = gpu.function(&kernel.spec, kernel.entry)?;
    let dim_i = as_i32(op, "dim", dim)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(w).arg(y).arg(&dim_i).arg(&eps);
    if let Some(wide) = &kernel.wide {
        launch.arg(wide);
    }
    // SAFETY: arguments match the kernel's signature above and the buffers hold rows×dim (checked).
    unsafe { launch.launch(grid1(rows, kernel.threads)) }.doing(|| format!("launching {op} on {rows} rows × {dim}"))?;
    Ok(())
}
