//! `rmsnorm_bf16`: bf16 rows normalized as `tf_core::ops::rms_norm_bf16` does, one block per row.

use super::{as_i32, check_len};
use crate::error::DriverResultExt;
use crate::pool::PoolBuf;
use crate::{Error, Gpu, kernels};
use cudarc::driver::{LaunchConfig, PushKernelArg};

/// Threads per row; a fixed count keeps each row's reduction tree the same whatever the batch.
pub const RMSNORM_THREADS: u32 = 256;

/// `y[r] = w · x[r] / sqrt(mean(x[r]²) + eps)` for `rows` rows of `dim` bf16 values.
pub fn rmsnorm_bf16(
    gpu: &Gpu,
    x: &PoolBuf<'_>,
    w: &PoolBuf<'_>,
    y: &mut PoolBuf<'_>,
    rows: usize,
    dim: usize,
    eps: f32,
) -> Result<(), Error> {
    const OP: &str = "rmsnorm_bf16";
    let bytes = rows.checked_mul(dim).and_then(|n| n.checked_mul(2));
    let bytes = bytes.ok_or_else(|| Error::Launch { op: OP, what: format!("{rows}×{dim} overflows") })?;
    check_len(OP, "x", x, bytes)?;
    check_len(OP, "w", w, dim * 2)?;
    check_len(OP, "y", y, bytes)?;
    if rows == 0 || dim == 0 {
        return Ok(());
    }
    let threads = RMSNORM_THREADS.to_string();
    let f = gpu.function(&kernels::RMSNORM.spec(&[("RMSNORM_THREADS", &threads)]), OP)?;
    let (grid, dim_i) = (as_i32(OP, "rows", rows)? as u32, as_i32(OP, "dim", dim)?);
    let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (RMSNORM_THREADS, 1, 1), shared_mem_bytes: 0 };
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x.dev()).arg(w.dev()).arg(y.dev_mut()).arg(&dim_i).arg(&eps);
    // SAFETY: the arguments match `rmsnorm_bf16(const bf16*, const bf16*, bf16*, int, float)` and the buffers hold rows×dim.
    unsafe { launch.launch(cfg) }.doing(|| format!("launching {OP} on {rows}×{dim}"))?;
    Ok(())
}
