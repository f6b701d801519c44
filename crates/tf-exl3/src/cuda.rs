//! CUDA launchers of the FP4 expert GEMV: one weight against 1..8 rows, and routed (row, expert) pairs in one launch.

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg};
use std::marker::PhantomData;
use tf_cuda::error::DriverResultExt;
use tf_cuda::launch::grid;
use tf_cuda::{Error, Gpu, KernelSource, PoolBuf};

/// `fp4_gemv` and `fp4_gemv_routed`: packed E2M1 + E8M0 weights times FP8 activation rows, in the CPU reference's order.
pub const FP4_GEMV: KernelSource = KernelSource::new("fp4_gemv", include_str!("../kernels/fp4_gemv.cu"));
/// The helpers every `kernels/exl3*.cu` shares; each of those sources is this file followed by its own.
pub const EXL3_COMMON: &str = include_str!("../kernels/exl3_common.cuh");
/// EXL3 trellis linears: exact tile decode and the GEMVs, exact and tensor-core (`crate::exl3_cuda`).
pub const EXL3: KernelSource =
    KernelSource::new("exl3", concat!(include_str!("../kernels/exl3_common.cuh"), include_str!("../kernels/exl3.cu")));
/// The EXL3 prompt path: the effective weight rebuilt in fp16 for one dense GEMM (`crate::exl3_prompt`).
pub const EXL3_PROMPT: KernelSource = KernelSource::new(
    "exl3_prompt",
    concat!(include_str!("../kernels/exl3_common.cuh"), include_str!("../kernels/exl3_prompt.cu")),
);

/// Every kernel source of this crate, in file-name order (`tests/compile_kernels.rs` checks it lists `kernels/*.cu`).
pub const KERNELS: [KernelSource; 3] = [EXL3, EXL3_PROMPT, FP4_GEMV];

/// A kernel file's source as its [`KernelSource`] holds it: `kernels/exl3*.cu` files come after [`EXL3_COMMON`].
pub fn with_prelude(name: &str, file: &str) -> String {
    if name.starts_with("exl3") { format!("{EXL3_COMMON}{file}") } else { file.to_string() }
}

/// Activation rows one `fp4_gemv` launch takes; more rows run as further launches of at most this many.
pub const FP4_MAX_ROWS: usize = 8;

/// The kernel's `FP4_MAX_THREADS` default: its registers are budgeted for this many threads.
const MAX_THREADS: usize = 288;
/// Floats per activation block in shared memory (32 and 4 of padding), as the kernel's `XBLK`.
const XBLK: usize = 36;
/// Shared memory a plan may ask for; above 48 KiB the launch opts in, and the H100/H200 and GB10 allow ~227 KiB.
const SMEM_LIMIT: usize = 100 << 10;
/// Shared memory every launch gets without opting in.
const SMEM_DEFAULT: usize = 48 << 10;

/// How a launch covers K (`seg` 32-blocks per segment, `threads`, rows per thread); any plan gives the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp4Plan {
    pub rows: usize,
    pub seg: usize,
    pub threads: usize,
    pub rows_per_thread: usize,
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl Fp4Plan {
    /// One segment over all of K when whole warps tile it (`threads = lcm(K/32, 32)`), else segments of 32 blocks.
    pub fn new(rows: usize, k: usize) -> Fp4Plan {
        assert!((1..=FP4_MAX_ROWS).contains(&rows) && k > 0 && k.is_multiple_of(32), "fp4 plan: rows {rows}, K {k}");
        let kb = k / 32;
        // More rows per thread reuse an activation block more; rows × rows_per_thread serial sums must fit a segment.
        let rows_per_thread = match rows {
            1 => 8,
            2 => 4,
            r => (32 / r).min(8),
        };
        let whole = Fp4Plan { rows, seg: kb, threads: kb / gcd(kb, 32) * 32, rows_per_thread };
        let fits = whole.threads <= MAX_THREADS && rows_per_thread * rows <= kb && whole.smem_bytes() <= SMEM_LIMIT;
        // A grid block decodes its activations once, so it should span at least 8 weight rows.
        if fits && whole.tile_rows() >= 8 {
            return whole;
        }
        Fp4Plan { rows, seg: 32, threads: 128, rows_per_thread }
    }

    /// Weight rows per block of the grid.
    pub fn tile_rows(&self) -> usize {
        self.rows_per_thread * self.threads / self.seg
    }

    /// Dynamic shared memory: activations `[rows][seg][36]` and partials `[tile_rows·rows][seg rounded to 32, + 4]`.
    pub fn smem_bytes(&self) -> usize {
        let part_stride = self.seg.div_ceil(32) * 32 + 4;
        4 * (self.rows * self.seg * XBLK + self.tile_rows() * self.rows * part_stride)
    }

    fn defines(&self) -> [(&'static str, String); 2] {
        [("FP4_ROWS", self.rows.to_string()), ("FP4_RT", self.rows_per_thread.to_string())]
    }

    pub(crate) fn config(&self, n: usize, pairs: usize) -> LaunchConfig {
        grid((n.div_ceil(self.tile_rows()), pairs), self.threads as u32, self.smem_bytes())
    }

    /// The kernel for this plan, allowed the shared memory it needs.
    pub(crate) fn function(&self, gpu: &Gpu, entry: &'static str) -> Result<cudarc::driver::CudaFunction, Error> {
        let defines = self.defines();
        let defines: Vec<(&str, &str)> = defines.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let f = gpu.function(&FP4_GEMV.spec(&defines), entry)?;
        let smem = self.smem_bytes();
        // fp4_gemv_grouped also has 8 bytes a row of static shared memory, which counts against the same 48 KiB.
        if smem + 8 * self.rows > SMEM_DEFAULT {
            let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            f.set_attribute(attr, smem as i32).doing(|| format!("allowing {entry} {smem} bytes of shared memory"))?;
        }
        Ok(f)
    }
}

pub(crate) use tf_cuda::launch::{as_i32, check_len};

/// `rows × k` checked for overflow, for byte counts.
pub(crate) fn bytes(op: &'static str, a: usize, b: usize) -> Result<usize, Error> {
    a.checked_mul(b).ok_or_else(|| Error::Launch { op, what: format!("{a}×{b} bytes overflow") })
}

pub(crate) fn check_k(op: &'static str, k: usize) -> Result<(), Error> {
    if k > 0 && k.is_multiple_of(32) {
        return Ok(());
    }
    Err(Error::Launch { op, what: format!("K = {k} is not a positive multiple of 32") })
}

/// `y = Fp4Weight::forward_f32` (`rows × n` f32) from `w` `[n, k/2]`, `ws` `[n, k/32]` and act_quant_fp8's codes/scales.
pub fn fp4_gemv(
    gpu: &Gpu,
    (w, ws): (&PoolBuf<'_>, &PoolBuf<'_>),
    codes: &PoolBuf<'_>,
    scales: &PoolBuf<'_>,
    y: &mut PoolBuf<'_>,
    (rows, n, k): (usize, usize, usize),
) -> Result<(), Error> {
    const OP: &str = "fp4_gemv";
    check_k(OP, k)?;
    check_len(OP, "w", w, bytes(OP, n, k / 2)?)?;
    check_len(OP, "ws", ws, bytes(OP, n, k / 32)?)?;
    check_len(OP, "codes", codes, bytes(OP, rows, k)?)?;
    check_len(OP, "scales", scales, bytes(OP, rows, k / 8)?)?;
    check_len(OP, "y", y, bytes(OP, bytes(OP, rows, n)?, 4)?)?;
    let (n_i, k_i) = (as_i32(OP, "n", n)?, as_i32(OP, "k", k)?);
    if n == 0 {
        return Ok(());
    }
    for r0 in (0..rows).step_by(FP4_MAX_ROWS) {
        let plan = Fp4Plan::new(FP4_MAX_ROWS.min(rows - r0), k);
        let f = plan.function(gpu, OP)?;
        let seg = as_i32(OP, "seg", plan.seg)?;
        let (xq, xs) = (codes.dev().slice(r0 * k..), scales.dev().slice(r0 * (k / 8)..));
        let mut out = y.dev_mut().slice_mut(r0 * n * 4..);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(w.dev()).arg(ws.dev()).arg(&xq).arg(&xs).arg(&mut out).arg(&n_i).arg(&k_i).arg(&seg);
        // SAFETY: arguments match the kernel's (u8*, u8*, u8*, float*, float*, int, int, int); extents checked above.
        unsafe { launch.launch(plan.config(n, 1)) }.doing(|| format!("launching {OP} on {}×{n}×{k}", plan.rows))?;
    }
    Ok(())
}

/// Expert weights of one shape `[n, k/2]` + `[n, k/32]` as device pointer tables; borrows the buffers it points at.
#[derive(Debug)]
pub struct Fp4Experts<'g, 'b> {
    pub(crate) wptr: PoolBuf<'g>,
    pub(crate) sptr: PoolBuf<'g>,
    pub(crate) count: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    _borrows: PhantomData<&'b PoolBuf<'g>>,
}

impl<'g, 'b> Fp4Experts<'g, 'b> {
    /// Tables of `experts` (weight, scale) buffers, each checked to hold an `[n, k/2]` and `[n, k/32]` expert.
    pub fn new(
        gpu: &'g Gpu,
        experts: &[(&'b PoolBuf<'g>, &'b PoolBuf<'g>)],
        (n, k): (usize, usize),
    ) -> Result<Self, Error> {
        const OP: &str = "fp4 expert table";
        check_k(OP, k)?;
        let (mut wp, mut sp) = (Vec::with_capacity(experts.len()), Vec::with_capacity(experts.len()));
        for (e, (w, s)) in experts.iter().enumerate() {
            check_len(OP, &format!("expert {e} weight"), w, bytes(OP, n, k / 2)?)?;
            check_len(OP, &format!("expert {e} scale"), s, bytes(OP, n, k / 32)?)?;
            wp.push(w.dev().device_ptr(gpu.stream()).0);
            sp.push(s.dev().device_ptr(gpu.stream()).0);
        }
        as_i32(OP, "experts", experts.len())?;
        let (wptr, sptr) = (gpu.upload(&wp)?, gpu.upload(&sp)?);
        Ok(Fp4Experts { wptr, sptr, count: experts.len(), n, k, _borrows: PhantomData })
    }

    /// The same tables without the borrow of the expert buffers, for a holder that owns them; the caller keeps them alive.
    #[allow(clippy::missing_safety_doc)]
    pub unsafe fn into_detached(self) -> Fp4Experts<'g, 'static> {
        let Fp4Experts { wptr, sptr, count, n, k, .. } = self;
        Fp4Experts { wptr, sptr, count, n, k, _borrows: PhantomData }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Which activation row a routed pair reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutedActs {
    /// Pair `p` reads token row `p / topk` (`w1`, `w3`: every expert of a token sees its input).
    PerToken { topk: usize },
    /// Pair `p` reads row `p` (`w2`: each expert has its own hidden row).
    PerPair,
}

/// A routed launch's checks: activations per `acts`, outputs `[pairs, n]`; (rows per token, [n, k, experts, that] as i32).
pub(crate) fn routed_extents(
    op: &'static str,
    experts: &Fp4Experts<'_, '_>,
    (codes, scales): (&PoolBuf<'_>, &PoolBuf<'_>),
    acts: RoutedActs,
    y: &PoolBuf<'_>,
    pairs: usize,
) -> Result<(usize, [i32; 4]), Error> {
    let (n, k) = (experts.n, experts.k);
    let div = match acts {
        RoutedActs::PerToken { topk } if topk > 0 && pairs.is_multiple_of(topk) => topk,
        RoutedActs::PerToken { topk } => {
            return Err(Error::Launch { op, what: format!("{pairs} pairs are not whole tokens of top-{topk}") });
        }
        RoutedActs::PerPair => 1,
    };
    let act_rows = pairs / div;
    check_len(op, "codes", codes, bytes(op, act_rows, k)?)?;
    check_len(op, "scales", scales, bytes(op, act_rows, k / 8)?)?;
    check_len(op, "y", y, bytes(op, bytes(op, pairs, n)?, 4)?)?;
    let ints =
        [as_i32(op, "n", n)?, as_i32(op, "k", k)?, as_i32(op, "experts", experts.count)?, as_i32(op, "topk", div)?];
    Ok((div, ints))
}

/// `y[p] = forward_f32` of expert `ids[p]` (i32) on its activation row (per `acts`); an id outside the table gives NaN.
pub fn fp4_gemv_routed(
    gpu: &Gpu,
    experts: &Fp4Experts<'_, '_>,
    ids: &PoolBuf<'_>,
    (codes, scales): (&PoolBuf<'_>, &PoolBuf<'_>),
    acts: RoutedActs,
    y: &mut PoolBuf<'_>,
    pairs: usize,
) -> Result<(), Error> {
    const OP: &str = "fp4_gemv_routed";
    let (n, k) = (experts.n, experts.k);
    check_len(OP, "ids", ids, bytes(OP, pairs, 4)?)?;
    let (div, [n_i, k_i, e_i, div_i]) = routed_extents(OP, experts, (codes, scales), acts, y, pairs)?;
    if n == 0 || pairs == 0 {
        return Ok(());
    }
    let plan = Fp4Plan::new(1, k);
    let f = plan.function(gpu, OP)?;
    let seg = as_i32(OP, "seg", plan.seg)?;
    // The grid's y extent is at most 65535; chunks start on a token so p / topk stays the chunk's own row.
    let chunk = 65535 - 65535 % div;
    for p0 in (0..pairs).step_by(chunk) {
        let count = chunk.min(pairs - p0);
        let ids_c = ids.dev().slice(p0 * 4..);
        let (xq, xs) = (codes.dev().slice(p0 / div * k..), scales.dev().slice(p0 / div * (k / 8)..));
        let mut out = y.dev_mut().slice_mut(p0 * n * 4..);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(experts.wptr.dev()).arg(experts.sptr.dev()).arg(&e_i).arg(&ids_c).arg(&xq).arg(&xs).arg(&div_i);
        launch.arg(&mut out).arg(&n_i).arg(&k_i).arg(&seg);
        // SAFETY: arguments match fp4_gemv_routed's; extents checked above; the tables' buffers outlive `experts`.
        unsafe { launch.launch(plan.config(n, count)) }
            .doing(|| format!("launching {OP} on {count} pairs ×{n}×{k}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expert_shapes_run_in_one_segment_of_whole_warps() {
        let w1 = Fp4Plan::new(1, 5120);
        assert_eq!((w1.seg, w1.threads, w1.tile_rows()), (160, 160, 8));
        let w2 = Fp4Plan::new(1, 2304);
        assert_eq!((w2.seg, w2.threads, w2.tile_rows()), (72, 288, 32));
        assert_eq!(Fp4Plan::new(8, 5120).seg, 32, "eight rows of 5120 do not fit shared memory at once");
    }

    #[test]
    fn every_plan_meets_the_kernels_checks() {
        for rows in 1..=FP4_MAX_ROWS {
            for k in (32..=20480).step_by(32).chain([32 * 1021, 1 << 20]) {
                let p = Fp4Plan::new(rows, k);
                let case = format!("rows {rows}, K {k}: {p:?}");
                assert!(p.threads.is_multiple_of(32) && p.threads <= MAX_THREADS, "{case}");
                assert!(p.threads.is_multiple_of(p.seg) && p.rows_per_thread * rows <= p.seg, "{case}");
                assert!(p.smem_bytes() <= SMEM_LIMIT && p.tile_rows() * rows <= p.threads, "{case}");
            }
        }
    }
}
