//! `engram_gate`: the Engram gate (dsv41 §10.2) after `wkv`, as `crate::engram::EngramGate::forward` computes it.

use super::{In, Out, bytes, grid, int, need};
use crate::cuda::kernels::ENGRAM;
use cudarc::driver::PushKernelArg;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// `ENGRAM_THREADS` in `kernels/engram.cu`: the threads that write a stream.
const THREADS: u32 = 256;

/// EngramGate::forward's gate on x bf16 [rows, hc, dim] in place, from kv f32 [rows, (hc+1)·dim] (wkv's GEMV output, first rounded to bf16 as the CPU's wkv.forward returns bf16) and weight f32 [hc, dim] (q_weight⊙k_weight).
pub fn engram_gate(
    gpu: &Gpu,
    x: &mut Out<'_>,
    kv: &In<'_>,
    weight: &In<'_>,
    (rows, hc, dim): (usize, usize, usize),
    eps: f32,
) -> Result<(), Error> {
    const OP: &str = "engram_gate";
    if hc == 0 || hc > 65535 || dim == 0 {
        return Err(Error::Launch {
            op: OP, what: format!("hc = {hc}, dim = {dim}: needs 1 ≤ hc ≤ 65535, dim ≥ 1")
        });
    }
    need(OP, "x", x.len(), bytes(OP, &[rows, hc, dim, 2])?)?;
    need(OP, "kv", kv.len(), bytes(OP, &[rows, hc + 1, dim, 4])?)?;
    need(OP, "weight", weight.len(), bytes(OP, &[hc, dim, 4])?)?;
    if rows == 0 {
        return Ok(());
    }
    int(OP, "rows", rows)?;
    let (hc_i, dim_i) = (int(OP, "hc", hc)?, int(OP, "dim", dim)?);
    // The CPU's exact expression, so the kernel multiplies by the same f32.
    let inv_sqrt_dim = (dim as f32).powf(-0.5);
    let f = gpu.function(&ENGRAM.spec(&[]), OP)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(kv).arg(weight).arg(&hc_i).arg(&dim_i).arg(&eps).arg(&inv_sqrt_dim);
    // SAFETY: arguments match `engram_gate(u16*, const f32*, const f32*, int, int, float, float)`; sizes checked above.
    unsafe { launch.launch(grid((rows, hc), THREADS, 0)) }.doing(|| format!("launching {OP} on {rows} rows"))?;
    Ok(())
}
