//! `qdq_fp8_pow2`, `qdq_fp4`: the forward's fake-quant points in place, bit-exact to `tf_core::formats`.

use super::{Out, bytes, int, need, strided};
use crate::cuda::kernels::FAKEQUANT;
use cudarc::driver::PushKernelArg;
use tf_core::formats::Fp4Scale;
use tf_core::formats::quant::{FP4_E4M3_AMAX_FLOOR, FP4_E8M0_AMAX_FLOOR, FP4_MAX_INV, FP8_AMAX_FLOOR, FP8_MAX_INV};
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// Warps per block; one warp owns a group.
const WARPS: usize = 8;

/// Checks `n` bf16 in `x` split into whole groups of `group`; returns the group count.
fn groups_of(op: &'static str, x: &Out<'_>, n: usize, group: usize) -> Result<usize, Error> {
    need(op, "x", x.len(), bytes(op, &[n, 2])?)?;
    if group == 0 || !n.is_multiple_of(group) {
        return Err(Error::Launch { op, what: format!("{n} values do not split into groups of {group}") });
    }
    int(op, "group", group)?;
    Ok(n / group)
}

/// Quantizes each group of `group` bf16 to E4M3 with a power-of-two scale and back, in place.
pub fn qdq_fp8_pow2(gpu: &Gpu, x: &mut Out<'_>, n: usize, group: usize) -> Result<(), Error> {
    const OP: &str = "qdq_fp8_pow2";
    let groups = groups_of(OP, x, n, group)?;
    if groups == 0 {
        return Ok(());
    }
    let f = gpu.function(&FAKEQUANT.spec(&[]), OP)?;
    let (g64, gi) = (groups as i64, group as i32);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(&g64).arg(&gi).arg(&FP8_MAX_INV).arg(&FP8_AMAX_FLOOR);
    // SAFETY: arguments match `qdq_fp8_pow2(u16*, long long, int, float, float)`; x holds groups × group bf16.
    unsafe { launch.launch(strided(groups, WARPS, (WARPS * 32) as u32)) }
        .doing(|| format!("launching {OP} on {n} values"))?;
    Ok(())
}

/// Quantizes each group of `group` bf16 to E2M1 with an E8M0 or E4M3 scale and back, in place.
pub fn qdq_fp4(gpu: &Gpu, x: &mut Out<'_>, n: usize, group: usize, kind: Fp4Scale) -> Result<(), Error> {
    const OP: &str = "qdq_fp4";
    let groups = groups_of(OP, x, n, group)?;
    if groups == 0 {
        return Ok(());
    }
    let f = gpu.function(&FAKEQUANT.spec(&[]), OP)?;
    let (e8m0, floor) = match kind {
        Fp4Scale::E8m0 => (1i32, FP4_E8M0_AMAX_FLOOR),
        Fp4Scale::E4m3 => (0i32, FP4_E4M3_AMAX_FLOOR),
    };
    let (g64, gi) = (groups as i64, group as i32);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(&g64).arg(&gi).arg(&e8m0).arg(&FP4_MAX_INV).arg(&floor);
    // SAFETY: arguments match `qdq_fp4(u16*, long long, int, int, float, float)`; x holds groups × group bf16.
    unsafe { launch.launch(strided(groups, WARPS, (WARPS * 32) as u32)) }
        .doing(|| format!("launching {OP} on {n} values"))?;
    Ok(())
}
