//! FP8 decode linears: activation quantization (`act_quant_fp8`) and the block-scaled GEMV (`fp8_gemv`) it feeds.

use super::{as_i32, check_len};
use crate::error::DriverResultExt;
use crate::launch::{grid, grid1};
use crate::pool::PoolBuf;
use crate::{Error, Gpu, kernels};
use cudarc::driver::PushKernelArg;
use cudarc::driver::sys::CUfunction_attribute;

/// Activation rows one `fp8_gemv` launch takes; more rows run as further launches of at most this many.
pub const FP8_MAX_ROWS: usize = 8;
/// K blocks per pipeline chunk (the kernel's default, mirrored for its shared memory size).
const CHUNK_BLOCKS: usize = 16;

/// Pipeline stages the kernel uses for `rows` rows by default (`FP8_STAGES`).
fn stages(rows: usize) -> usize {
    if rows <= 4 { 4 } else { 3 }
}

/// How the GEMV decodes weight codes; both are exact, they differ only in which units do the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Decode {
    /// `cvt.rn.f16x2.e4m3x2`, then f16 to f32.
    Hardware,
    /// Integer bit placement, then one exact multiply by 2^120.
    Bits,
}

/// How weight block scales are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightScale {
    /// One E8M0 byte per 32×32 block (V4 checkpoints).
    E8m0,
    /// One f32 per 32×32 block.
    F32,
}

impl WeightScale {
    pub fn bytes(self) -> usize {
        match self {
            WeightScale::E8m0 => 1,
            WeightScale::F32 => 4,
        }
    }
}

/// Which `fp8_gemv.cu` entry runs; every kernel computes the same bits, they differ only in how work is spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Kernel {
    /// `fp8_gemv`: 32 outputs per block (one per lane), 8 warps splitting K, a cp.async pipeline.
    Pipelined,
    /// `fp8_gemv_split`: `outs` outputs per warp, lanes taking different 32-blocks of K, `unroll` rounds in flight.
    Split { outs: usize, unroll: usize, warps: usize },
    /// `fp8_gemm`: all rows in one launch, 64 rows × 64 outputs a block, each weight read once per 64 rows (prompts).
    Tiled,
    /// `fp8_gemv_wide`: `outs` outputs a block over all of K, activations staged as f32, every 32-byte unit its own thread.
    Wide { outs: usize },
}

impl Fp8Kernel {
    /// A short name for tables, e.g. `split o1 u4 w4`.
    pub fn label(self) -> String {
        match self {
            Fp8Kernel::Pipelined => "pipelined".into(),
            Fp8Kernel::Split { outs, unroll, warps } => format!("split o{outs} u{unroll} w{warps}"),
            Fp8Kernel::Tiled => "tiled".into(),
            Fp8Kernel::Wide { outs } => format!("wide o{outs}"),
        }
    }
}

/// Dynamic shared memory of one `fp8_gemv` block for `rows` rows (the kernel traps if given less).
pub fn fp8_gemv_smem_bytes(rows: usize) -> usize {
    let (chunk, stages) = (CHUNK_BLOCKS * 32, stages(rows));
    stages * 32 * (chunk + 16) + stages * rows * chunk + rows * chunk * 4 + CHUNK_BLOCKS * rows * 32 * 4
}

/// Dynamic shared memory of one `fp8_gemv_wide` block: the staged activations (36 f32 a 32-block) and the terms.
pub fn fp8_wide_smem_bytes(rows: usize, outs: usize, k: usize) -> usize {
    let kb = k / 32;
    (rows * kb * 36 + outs * rows * (kb + 1)) * 4
}

/// Shared memory up to which a wide launch is made (two blocks an SM still fit); past it the wide kernel is not used.
pub const FP8_WIDE_SMEM: usize = 96 * 1024;

/// [`fp8_gemv`]'s kernel: at one row `wide` where it fits (`split` for large N with [`FP8_SPLIT_ONE_ROW`]), more rows `pipelined`, `tiled` from 64.
pub fn fp8_default_kernel(gpu: &Gpu, dims: (usize, usize, usize)) -> Fp8Kernel {
    kernel_for(gpu.sm_count(), dims, FP8_SPLIT_ONE_ROW)
}

/// Whether one row of large N takes `split`: faster than `wide` at every such shape on an H200 (run 28) and an H100 (run 29), bits checked equal.
pub const FP8_SPLIT_ONE_ROW: bool = true;

/// [`fp8_default_kernel`] on a device of `sms` multiprocessors, with or without the one-row split pick.
fn kernel_for(sms: usize, (rows, n, k): (usize, usize, usize), split_one_row: bool) -> Fp8Kernel {
    if rows >= TILED_ROWS {
        return Fp8Kernel::Tiled;
    }
    if rows != 1 {
        return Fp8Kernel::Pipelined;
    }
    // N large enough for two blocks of 8 an SM: four outputs a warp beat the wide kernel at all four such shapes timed.
    if split_one_row && n.div_ceil(8) >= 2 * sms {
        return Fp8Kernel::Split { outs: 4, unroll: 1, warps: 4 };
    }
    let outs = [8, 4, 2].into_iter().find(|&o| n.div_ceil(o) >= 2 * sms).unwrap_or(2);
    if fp8_wide_smem_bytes(1, outs, k) <= FP8_WIDE_SMEM { Fp8Kernel::Wide { outs } } else { Fp8Kernel::Pipelined }
}

/// Quantizes `rows × k` bf16 (`x`) to E4M3 `codes` (`rows × k` bytes) and f32 power-of-two `scales` (`rows × k/32`).
pub fn act_quant_fp8(
    gpu: &Gpu,
    x: &PoolBuf<'_>,
    codes: &mut PoolBuf<'_>,
    scales: &mut PoolBuf<'_>,
    rows: usize,
    k: usize,
) -> Result<(), Error> {
    const OP: &str = "act_quant_fp8";
    if !k.is_multiple_of(32) {
        return Err(Error::Launch { op: OP, what: format!("K = {k} is not a multiple of 32") });
    }
    let n = rows.checked_mul(k).ok_or_else(|| Error::Launch { op: OP, what: format!("{rows}×{k} overflows") })?;
    check_len(OP, "x", x, n * 2)?;
    check_len(OP, "codes", codes, n)?;
    check_len(OP, "scales", scales, n / 32 * 4)?;
    if n == 0 {
        return Ok(());
    }
    let groups = as_i32(OP, "groups", n / 32)?;
    let f = gpu.function(&kernels::ACT_QUANT.spec(&[]), OP)?;
    let cfg = grid1((n / 32).div_ceil(8), 256);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x.dev()).arg(codes.dev_mut()).arg(scales.dev_mut()).arg(&groups);
    // SAFETY: arguments match `act_quant_fp8(const bf16*, u8*, float*, int)`; the buffers hold rows×k (checked).
    unsafe { launch.launch(cfg) }.doing(|| format!("launching {OP} on {rows}×{k}"))?;
    Ok(())
}

/// `y = qgemm_f32(w, x)` (`rows × n` f32) from E4M3 `w` `[n, k]`, `wscale` `[⌈n/32⌉, k/32]` and [`act_quant_fp8`]'s output.
#[allow(clippy::too_many_arguments)]
pub fn fp8_gemv(
    gpu: &Gpu,
    w: &PoolBuf<'_>,
    wscale: &PoolBuf<'_>,
    scale_kind: WeightScale,
    codes: &PoolBuf<'_>,
    scales: &PoolBuf<'_>,
    y: &mut PoolBuf<'_>,
    (rows, n, k): (usize, usize, usize),
    decode: Fp8Decode,
) -> Result<(), Error> {
    let kernel = fp8_default_kernel(gpu, (rows, n, k));
    fp8_gemv_with(gpu, w, wscale, scale_kind, codes, scales, y, (rows, n, k), decode, kernel)
}

/// Rows from which [`fp8_gemv`] takes the tiled kernel: on an H100 it lost at 16 rows (162 vs 55 µs) and won at 64 (171 vs 218 µs).
pub const TILED_ROWS: usize = 64;

/// [`fp8_gemv`] by a chosen kernel (the same bits from each).
#[allow(clippy::too_many_arguments)]
pub fn fp8_gemv_with(
    gpu: &Gpu,
    w: &PoolBuf<'_>,
    wscale: &PoolBuf<'_>,
    scale_kind: WeightScale,
    codes: &PoolBuf<'_>,
    scales: &PoolBuf<'_>,
    y: &mut PoolBuf<'_>,
    dims: (usize, usize, usize),
    decode: Fp8Decode,
    kernel: Fp8Kernel,
) -> Result<(), Error> {
    gemv_launch(gpu, (w, wscale, scale_kind), (codes, scales), y, dims, decode, kernel, false)
}

/// `y` bf16 `[rows, n]` = [`fp8_gemv`]'s sums rounded to bf16 in the same launch (`kernel` must be `Wide` or `Split`).
#[allow(clippy::too_many_arguments)]
pub fn fp8_gemv_bf16(
    gpu: &Gpu,
    w: &PoolBuf<'_>,
    (wscale, scale_kind): (&PoolBuf<'_>, WeightScale),
    codes: &PoolBuf<'_>,
    scales: &PoolBuf<'_>,
    y: &mut PoolBuf<'_>,
    dims: (usize, usize, usize),
    kernel: Fp8Kernel,
) -> Result<(), Error> {
    if !matches!(kernel, Fp8Kernel::Wide { .. } | Fp8Kernel::Split { .. }) {
        return Err(Error::Launch {
            op: "fp8_gemv",
            what: format!("bf16 output needs the wide or split kernel, not {kernel:?}"),
        });
    }
    gemv_launch(gpu, (w, wscale, scale_kind), (codes, scales), y, dims, Fp8Decode::Hardware, kernel, true)
}

#[allow(clippy::too_many_arguments)]
fn gemv_launch(
    gpu: &Gpu,
    (w, wscale, scale_kind): (&PoolBuf<'_>, &PoolBuf<'_>, WeightScale),
    (codes, scales): (&PoolBuf<'_>, &PoolBuf<'_>),
    y: &mut PoolBuf<'_>,
    (rows, n, k): (usize, usize, usize),
    decode: Fp8Decode,
    kernel: Fp8Kernel,
    bf16_out: bool,
) -> Result<(), Error> {
    const OP: &str = "fp8_gemv";
    if !k.is_multiple_of(32) {
        return Err(Error::Launch { op: OP, what: format!("K = {k} is not a multiple of 32") });
    }
    let big = |what: &str| Error::Launch { op: OP, what: format!("{what} overflows ({rows}×{n}×{k})") };
    check_len(OP, "w", w, n.checked_mul(k).ok_or_else(|| big("n×k"))?)?;
    check_len(OP, "wscale", wscale, n.div_ceil(32) * (k / 32) * scale_kind.bytes())?;
    check_len(OP, "codes", codes, rows.checked_mul(k).ok_or_else(|| big("rows×k"))?)?;
    check_len(OP, "scales", scales, rows * (k / 32) * 4)?;
    let y_width = if bf16_out { 2 } else { 4 };
    check_len(OP, "y", y, rows.checked_mul(n).and_then(|v| v.checked_mul(y_width)).ok_or_else(|| big("rows×n"))?)?;
    if kernel == Fp8Kernel::Tiled {
        return fp8_gemm(gpu, (w, wscale, scale_kind), (codes, scales), y, (rows, n, k));
    }
    let (n_i, k_i) = (as_i32(OP, "n", n)?, as_i32(OP, "k", k)?);
    for r0 in (0..rows).step_by(FP8_MAX_ROWS) {
        let group = FP8_MAX_ROWS.min(rows - r0);
        let bits = if decode == Fp8Decode::Bits { "1" } else { "0" };
        let f32_scales = if scale_kind == WeightScale::F32 { "1" } else { "0" };
        let mut defines =
            vec![("FP8_ROWS", group.to_string()), ("FP8_DECODE", bits.into()), ("FP8_WSCALE_F32", f32_scales.into())];
        defines.push(("FP8_BF16", u8::from(bf16_out).to_string()));
        let (f, cfg) = match kernel {
            Fp8Kernel::Pipelined => {
                let f = gpu.function(&kernels::FP8_GEMV.spec(&borrow(&defines)), OP)?;
                let smem = fp8_gemv_smem_bytes(group);
                let max_smem = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
                f.set_attribute(max_smem, smem as i32)
                    .doing(|| format!("allowing {OP} {smem} bytes of shared memory"))?;
                (f, grid((n.div_ceil(32), 1), 256, smem))
            }
            Fp8Kernel::Tiled => unreachable!("tiled calls return above"),
            Fp8Kernel::Wide { outs } => {
                if ![1, 2, 4, 8].contains(&outs) || fp8_wide_smem_bytes(group, outs, k) > FP8_WIDE_SMEM {
                    let what = format!("no wide kernel {kernel:?} for {group} rows of K = {k}");
                    return Err(Error::Launch { op: OP, what });
                }
                defines.push(("FP8W_OUTS", outs.to_string()));
                let f = gpu.function(&kernels::FP8_GEMV.spec(&borrow(&defines)), "fp8_gemv_wide")?;
                let smem = fp8_wide_smem_bytes(group, outs, k);
                let max_smem = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
                f.set_attribute(max_smem, smem as i32)
                    .doing(|| format!("allowing {OP} (wide) {smem} bytes of shared memory"))?;
                (f, grid((n.div_ceil(outs), 1), 256, smem))
            }
            Fp8Kernel::Split { outs, unroll, warps } => {
                if outs == 0 || outs * group > 32 || !(1..=8).contains(&unroll) || !(1..=32).contains(&warps) {
                    return Err(Error::Launch {
                        op: OP,
                        what: format!("bad split kernel {kernel:?} for {group} rows"),
                    });
                }
                defines.extend([("FP8S_OUTS", outs.to_string()), ("FP8S_UNROLL", unroll.to_string())]);
                defines.push(("FP8S_WARPS", warps.to_string()));
                let f = gpu.function(&kernels::FP8_GEMV.spec(&borrow(&defines)), "fp8_gemv_split")?;
                (f, grid1(n.div_ceil(outs * warps), 32 * warps as u32))
            }
        };
        let (xq, xs) = (codes.dev().slice(r0 * k..), scales.dev().slice(r0 * (k / 32) * 4..));
        let mut out = y.dev_mut().slice_mut(r0 * n * y_width..);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(w.dev()).arg(wscale.dev()).arg(&xq).arg(&xs).arg(&mut out).arg(&n_i).arg(&k_i);
        // SAFETY: arguments match `fp8_gemv(const u8*, const void*, const u8*, const float*, float*, int, int)`, extents checked.
        unsafe { launch.launch(cfg) }.doing(|| format!("launching {OP} on {group}×{n}×{k} (rows from {r0})"))?;
    }
    Ok(())
}

/// Rows of one `fp8_gemm` tile; the grid's y extent (at most 65535 tiles) bounds the rows of a launch.
const GEMM_ROWS: usize = 64;

/// [`fp8_gemv_with`]'s `Tiled` kernel, extents already checked: launches of up to 65535 row tiles.
fn fp8_gemm(
    gpu: &Gpu,
    (w, wscale, scale_kind): (&PoolBuf<'_>, &PoolBuf<'_>, WeightScale),
    (codes, scales): (&PoolBuf<'_>, &PoolBuf<'_>),
    y: &mut PoolBuf<'_>,
    (rows, n, k): (usize, usize, usize),
) -> Result<(), Error> {
    const OP: &str = "fp8_gemm";
    if rows == 0 || n == 0 || k == 0 {
        return Ok(());
    }
    let (n_i, k_i) = (as_i32(OP, "n", n)?, as_i32(OP, "k", k)?);
    let f32_scales = if scale_kind == WeightScale::F32 { "1" } else { "0" };
    let f = gpu.function(&kernels::FP8_GEMM.spec(&[("FP8_WSCALE_F32", f32_scales)]), OP)?;
    let per = GEMM_ROWS * 65535;
    for r0 in (0..rows).step_by(per) {
        let count = per.min(rows - r0);
        let rows_i = as_i32(OP, "rows", count)?;
        let (xq, xs) = (codes.dev().slice(r0 * k..), scales.dev().slice(r0 * (k / 32) * 4..));
        let mut out = y.dev_mut().slice_mut(r0 * n * 4..);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(w.dev()).arg(wscale.dev()).arg(&xq).arg(&xs).arg(&mut out).arg(&rows_i).arg(&n_i).arg(&k_i);
        let cfg = grid((n.div_ceil(GEMM_ROWS), count.div_ceil(GEMM_ROWS)), 256, 0);
        // SAFETY: arguments match `fp8_gemm(const u8*, const void*, const u8*, const float*, float*, int, int, int)`, extents checked.
        unsafe { launch.launch(cfg) }.doing(|| format!("launching {OP} on {count}×{n}×{k} (rows from {r0})"))?;
    }
    Ok(())
}

/// `(&str, &str)` views of owned defines, as `KernelSource::spec` takes them.
fn borrow<'a>(defines: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    defines.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_takes_wide_or_split_by_n_and_more_rows_keep_theirs() {
        // An H100's 132 SMs: kv (512 outputs) needs 2 a block for 264 blocks, wo_b (5,120) fills them with 8.
        for split in [false, true] {
            assert_eq!(kernel_for(132, (1, 512, 5120), split), Fp8Kernel::Wide { outs: 2 });
            assert_eq!(kernel_for(132, (1, 2048, 5120), split), Fp8Kernel::Wide { outs: 4 });
            assert_eq!(kernel_for(132, (1, 2104, 4096), split), Fp8Kernel::Wide { outs: 4 });
            assert_eq!(kernel_for(132, (2, 5120, 8192), split), Fp8Kernel::Pipelined);
            assert_eq!(kernel_for(132, (63, 5120, 8192), split), Fp8Kernel::Pipelined);
            assert_eq!(kernel_for(132, (TILED_ROWS, 5120, 8192), split), Fp8Kernel::Tiled);
            // K past what 96 KiB stages (about 21,000 for one row) falls back rather than failing the launch.
            assert_eq!(kernel_for(132, (1, 1024, 32768), split), Fp8Kernel::Pipelined);
        }
        // From 2,105 outputs (264 blocks of 8: two an SM) the split pick takes four outputs a warp; without it, wide o8.
        let split4 = Fp8Kernel::Split { outs: 4, unroll: 1, warps: 4 };
        assert_eq!(kernel_for(132, (1, 2105, 4096), true), split4);
        assert_eq!(kernel_for(132, (1, 5120, 8192), true), split4);
        assert_eq!(kernel_for(132, (1, 5120, 8192), false), Fp8Kernel::Wide { outs: 8 });
        assert!(fp8_wide_smem_bytes(1, 8, 16384) <= FP8_WIDE_SMEM);
    }
}
