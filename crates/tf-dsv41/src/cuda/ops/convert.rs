//! `f32_to_bf16` exactly as `tf_core::formats::to_bf16` (NaN payloads kept, made quiet); `exp_ln_1p` as `tf_core::ops::math`.

use super::{In, Out, bytes, need, strided};
use crate::cuda::kernels::CONVERT;
use cudarc::driver::PushKernelArg;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// Threads per block of the grid-stride conversion.
const THREADS: usize = 256;

/// `y[i] = to_bf16(x[i])` for `n` f32 values into `n` bf16.
pub fn f32_to_bf16(gpu: &Gpu, x: &In<'_>, y: &mut Out<'_>, n: usize) -> Result<(), Error> {
    const OP: &str = "f32_to_bf16";
    need(OP, "x", x.len(), bytes(OP, &[n, 4])?)?;
    need(OP, "y", y.len(), bytes(OP, &[n, 2])?)?;
    if n == 0 {
        return Ok(());
    }
    let f = gpu.function(&CONVERT.spec(&[]), OP)?;
    let n_u = n as u64;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(y).arg(&n_u);
    // SAFETY: arguments match `f32_to_bf16(const u32*, u16*, unsigned long long)`; x holds n f32 and y n bf16.
    unsafe { launch.launch(strided(n, THREADS, THREADS as u32)) }.doing(|| format!("launching {OP} on {n} values"))?;
    Ok(())
}

/// `e[i] = exp(x[i])`, `l[i] = ln_1p(x[i])` as every kernel computes them, for checks against `tf_core::ops::math`.
pub fn exp_ln_1p(gpu: &Gpu, x: &In<'_>, e: &mut Out<'_>, l: &mut Out<'_>, n: usize) -> Result<(), Error> {
    const OP: &str = "exp_log1p";
    let len = bytes(OP, &[n, 4])?;
    need(OP, "x", x.len(), len)?;
    need(OP, "e", e.len(), len)?;
    need(OP, "l", l.len(), len)?;
    if n == 0 {
        return Ok(());
    }
    let f = gpu.function(&CONVERT.spec(&[]), OP)?;
    let n_u = n as u64;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(e).arg(l).arg(&n_u);
    // SAFETY: arguments match `exp_log1p(const float*, float*, float*, unsigned long long)`; each holds n f32.
    unsafe { launch.launch(strided(n, THREADS, THREADS as u32)) }.doing(|| format!("launching {OP} on {n} values"))?;
    Ok(())
}
