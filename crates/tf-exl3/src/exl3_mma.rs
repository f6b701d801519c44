//! The tensor-core EXL3 kernel's host side: its split plan, the device table of linears it reads, one-weight and routed launches.

use crate::cuda::{EXL3, as_i32, bytes, check_len};
use crate::exl3::{HAD, SPLIT};
use crate::exl3_cuda::{GpuExl3, launch_exact};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaFunction, CudaView, CudaViewMut, DevicePtr, PushKernelArg};
use std::marker::PhantomData;
use tf_cuda::error::DriverResultExt;
use tf_cuda::launch::{grid, grid1};
use tf_cuda::{Error, Gpu, PoolBuf};

/// Rows one `exl3_gemv_mma` job takes (two mma row groups of 8).
pub const EXL3_MMA_ROWS: usize = 16;
/// Outputs one `exl3_gemv_mma` block owns: one Hadamard block, 8 warps of 16 columns.
pub(crate) const MMA_COLS: usize = 128;
/// Blocks a fast GEMV aims for (two per SM of an H100/H200); a function of the shape only, so bits never depend on the GPU.
const MMA_TARGET_BLOCKS: usize = 264;
/// Hadamard blocks per split at most: four would need over 227 KiB of shared memory at K = 8 and 16 rows (wo_b's 16384 inputs asked 19).
const MMA_MAX_PER: usize = 3;
/// Shared memory every launch gets without opting in.
const SMEM_DEFAULT: usize = 48 << 10;

/// Which kernels run an EXL3 linear: the exact split-order ones (the bits of `Exl3Weight::forward`), or tensor cores (a declared bound).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Exl3Kernels {
    #[default]
    Exact,
    /// Tier 2: `exl3_gemv_mma`, within 2^-16 of Σ|x·q| per column; a model's tokens may differ from the CPU's.
    Fast,
}

/// How `exl3_gemv_mma` splits the input: `kr` k-tiles (whole Hadamard blocks) per split, `splits` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaPlan {
    pub kr: usize,
    pub splits: usize,
}

impl MmaPlan {
    /// The split for an `(in_p, out_p)` weight; rows never change it, so a row's result does not depend on the batch.
    pub fn new(in_p: usize, out_p: usize) -> MmaPlan {
        let (groups, blocks) = (out_p / MMA_COLS, in_p / HAD);
        let want = MMA_TARGET_BLOCKS.div_ceil(groups).clamp(1, blocks);
        let per = blocks.div_ceil(want).min(MMA_MAX_PER);
        MmaPlan { kr: per * HAD / 16, splits: blocks.div_ceil(per) }
    }

    /// Dynamic shared memory of one block, as the kernel lays it out: two buffers (records or finishing rows, x, suh, svh, bias), A fragments.
    pub fn smem_bytes(&self, k: usize, rows: usize) -> usize {
        let tiles = (self.kr * 8 * 8 * k * 4).max(rows * MMA_COLS * 4);
        let buf = tiles + rows * self.kr * 64 + self.kr * 32 + HAD * 2 + HAD * 4;
        2 * buf + self.kr * rows.div_ceil(8) * 512
    }
}

/// The kernels' `Exl3Dev` row: trellis, suh, svh and bias (0 = none) device pointers, then K and the codebook as two i32.
pub(crate) fn dev_row(
    gpu: &Gpu,
    bufs: (&PoolBuf<'_>, &PoolBuf<'_>, &PoolBuf<'_>, Option<&PoolBuf<'_>>),
    (k, codebook): (usize, i32),
) -> [u64; 5] {
    let ptr = |b: &PoolBuf<'_>| b.dev().device_ptr(gpu.stream()).0;
    [ptr(bufs.0), ptr(bufs.1), ptr(bufs.2), bufs.3.map_or(0, ptr), k as u64 | (u64::from(codebook as u32) << 32)]
}

/// `entry` of the fast path, compiled for one K and codebook.
pub(crate) fn fast_fn(gpu: &Gpu, entry: &str, k: usize, codebook: i32) -> Result<CudaFunction, Error> {
    let (k, cb) = (k.to_string(), codebook.to_string());
    gpu.function(&EXL3.spec(&[("EXL3_K", &k), ("EXL3_CB", &cb)]), entry)
}

/// Dynamic shared memory of `exl3_gemv_exact` for `rows` rows: one split's records for its four warps, then the rotated x rows.
pub(crate) fn exact_smem_bytes(k: usize, rows: usize) -> usize {
    SPLIT / 16 * 8 * 8 * k * 4 + rows * SPLIT * 4
}

/// Compiles both kernels for (K, codebook) and allows them the shared memory of their most rows on this shape, outside graph capture.
pub(crate) fn prepare(gpu: &Gpu, k: usize, codebook: i32, (in_p, out_p): (usize, usize)) -> Result<(), Error> {
    let fast = MmaPlan::new(in_p, out_p).smem_bytes(k, EXL3_MMA_ROWS);
    for (entry, smem) in [("exl3_gemv_mma", fast), ("exl3_gemv_exact", exact_smem_bytes(k, 8))] {
        let f = fast_fn(gpu, entry, k, codebook)?;
        // Static shared memory (a flag) comes on top of the dynamic bytes, so a launch at exactly 48 KiB needs the opt-in too.
        if smem + 64 > SMEM_DEFAULT {
            let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            f.set_attribute(attr, smem as i32).doing(|| format!("allowing {entry} {smem} bytes of shared memory"))?;
        }
    }
    Ok(())
}

/// One launch's weight shape: `rows` (≤ 16) per job, and the K it is compiled for (jobs whose expert has another K leave).
pub(crate) struct MmaShape {
    pub in_p: usize,
    pub out_p: usize,
    pub k: usize,
    pub codebook: i32,
    pub rows: usize,
}

/// Which table row each of `count` jobs uses (`ids`, or row 0), which x rows it reads (`topk`: job / topk; 0: its own), and its counters.
pub(crate) struct MmaJobs<'a, 'g> {
    pub table: &'a PoolBuf<'g>,
    pub experts: usize,
    /// Device address of the jobs' i32 expert ids.
    pub ids: Option<u64>,
    pub topk: usize,
    pub count: usize,
    pub done: &'a PoolBuf<'g>,
}

/// Launches `exl3_gemv_mma` for `jobs` at `shape`; `part` holds at least jobs × splits × rows × out_p f32.
pub(crate) fn launch_mma(
    gpu: &Gpu,
    shape: &MmaShape,
    jobs: &MmaJobs<'_, '_>,
    x: &CudaView<'_, u8>,
    y: &mut CudaViewMut<'_, u8>,
    part: &mut PoolBuf<'_>,
) -> Result<(), Error> {
    const OP: &str = "exl3_gemv_mma";
    let plan = MmaPlan::new(shape.in_p, shape.out_p);
    let groups = shape.out_p / MMA_COLS;
    check_len(OP, "part", part, jobs.count * plan.splits * shape.rows * shape.out_p * 4)?;
    check_len(OP, "done", jobs.done, jobs.count * groups * 4)?;
    if jobs.count == 0 || shape.rows == 0 {
        return Ok(());
    }
    let f = fast_fn(gpu, OP, shape.k, shape.codebook)?;
    let smem = plan.smem_bytes(shape.k, shape.rows);
    // Persistent blocks: as many as fit at once, never more than the items (the bits do not depend on how many).
    let per_sm =
        f.occupancy_max_active_blocks_per_multiprocessor(256, smem, None).doing(|| format!("sizing {OP}'s grid"))?;
    let sms = gpu.context().attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    let sms = sms.doing(|| "reading the SM count".into())?.max(1) as usize;
    let items = groups * plan.splits * jobs.count;
    let blocks = items.min(per_sm.max(1) as usize * sms);
    let ints = [jobs.experts, jobs.topk, shape.rows, shape.in_p, shape.out_p, plan.kr, plan.splits, jobs.count];
    let [experts, topk, rows, in_i, out_i, kr, splits, count] = ints.map(|v| as_i32(OP, "a launch parameter", v));
    let (experts, topk, rows, in_i, out_i, kr) = (experts?, topk?, rows?, in_i?, out_i?, kr?);
    let (splits, count) = (splits?, count?);
    let ids = jobs.ids.unwrap_or(0);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(jobs.table.dev()).arg(&ids).arg(&experts).arg(&topk).arg(y).arg(part.dev_mut());
    launch.arg(jobs.done.dev()).arg(&rows).arg(&in_i).arg(&out_i).arg(&kr).arg(&splits).arg(&count);
    let cfg = grid((blocks, 1), 256, smem);
    // SAFETY: arguments match exl3_gemv_mma's signature; x, y, part and done were sized for these jobs by the callers and above.
    unsafe { launch.launch(cfg) }
        .doing(|| format!("launching {OP} on {} jobs × {rows} rows × {}×{}", jobs.count, shape.in_p, shape.out_p))?;
    Ok(())
}

/// Routed experts of one shape and codebook (K may differ per expert): one exact launch for all, a fast launch per K present, each job one row.
pub struct Exl3Experts<'g, 'b> {
    pub(crate) table: PoolBuf<'g>,
    done: PoolBuf<'g>,
    pub(crate) ks: Vec<usize>,
    /// Each expert's K, for launches that rebuild one expert.
    pub(crate) k_of: Vec<usize>,
    pub(crate) count: usize,
    max_pairs: usize,
    pub(crate) in_p: usize,
    pub(crate) out_p: usize,
    pub(crate) codebook: i32,
    _borrows: PhantomData<&'b GpuExl3<'g>>,
}

impl<'g, 'b> Exl3Experts<'g, 'b> {
    /// A table over `experts` (same shape and codebook) for up to `max_pairs` routed rows per call.
    pub fn new(gpu: &'g Gpu, experts: &[&'b GpuExl3<'g>], max_pairs: usize) -> Result<Self, Error> {
        const OP: &str = "exl3 expert table";
        let first = experts.first().ok_or_else(|| Error::Launch { op: OP, what: "no experts".into() })?;
        let mut rows = Vec::with_capacity(experts.len() * 5);
        let mut ks = Vec::new();
        for (e, w) in experts.iter().enumerate() {
            if (w.in_p, w.out_p, w.codebook()) != (first.in_p, first.out_p, first.codebook()) {
                return Err(Error::Launch {
                    op: OP,
                    what: format!(
                        "expert {e} is {}×{} codebook {}, expert 0 {}×{} codebook {}",
                        w.in_p,
                        w.out_p,
                        w.codebook(),
                        first.in_p,
                        first.out_p,
                        first.codebook()
                    ),
                });
            }
            rows.extend(w.dev_row(gpu));
            if !ks.contains(&w.k) {
                ks.push(w.k);
            }
        }
        ks.sort_unstable();
        for &k in &ks {
            prepare(gpu, k, first.codebook(), (first.in_p, first.out_p))?;
        }
        as_i32(OP, "experts", experts.len())?;
        Ok(Exl3Experts {
            k_of: experts.iter().map(|w| w.k).collect(),
            table: gpu.upload_exact(&rows)?,
            done: gpu.upload_exact(&vec![0u32; max_pairs.max(1) * first.out_p / MMA_COLS])?,
            ks,
            count: experts.len(),
            max_pairs,
            in_p: first.in_p,
            out_p: first.out_p,
            codebook: first.codebook(),
            _borrows: PhantomData,
        })
    }

    /// The same table without the borrow of the experts, for a holder that owns them; the caller keeps them alive.
    #[allow(clippy::missing_safety_doc)]
    pub unsafe fn into_detached(self) -> Exl3Experts<'g, 'static> {
        let Exl3Experts { table, done, ks, k_of, count, max_pairs, in_p, out_p, codebook, .. } = self;
        Exl3Experts { table, done, ks, k_of, count, max_pairs, in_p, out_p, codebook, _borrows: PhantomData }
    }

    /// Scratch `routed` needs for `pairs` rows (at most `max_pairs` run per launch).
    pub fn part_bytes(&self, pairs: usize) -> usize {
        pairs.min(self.max_pairs) * MmaPlan::new(self.in_p, self.out_p).splits * self.out_p * 4
    }

    /// `y[p] = x[topk > 0 ? p / topk : p] · W[ids[p]]` (f32, padded widths) for `pairs` rows; an id outside the table gives a NaN row.
    pub fn routed(
        &self,
        gpu: &Gpu,
        ids: &PoolBuf<'_>,
        x: &PoolBuf<'_>,
        topk: usize,
        (y, part): (&mut PoolBuf<'_>, &mut PoolBuf<'_>),
        (pairs, kernels): (usize, Exl3Kernels),
    ) -> Result<(), Error> {
        const OP: &str = "exl3 routed";
        check_len(OP, "ids", ids, bytes(OP, pairs, 4)?)?;
        check_len(OP, "x", x, bytes(OP, bytes(OP, x_rows(pairs, topk), self.in_p)?, 4)?)?;
        check_len(OP, "y", y, bytes(OP, bytes(OP, pairs, self.out_p)?, 4)?)?;
        // A launch takes whole tokens when pairs share a token's row.
        if topk > self.max_pairs {
            return Err(Error::Launch {
                op: OP,
                what: format!("topk {topk} exceeds the table's {} pairs", self.max_pairs),
            });
        }
        let chunk = self.max_pairs.checked_div(topk).map_or(self.max_pairs, |t| t * topk);
        let ids_at = ids.dev().device_ptr(gpu.stream()).0;
        for c0 in (0..pairs).step_by(chunk.max(1)) {
            let count = chunk.min(pairs - c0);
            let x0 = c0.checked_div(topk).unwrap_or(c0);
            let (xs, mut ys) = (x.dev().slice(x0 * self.in_p * 4..), y.dev_mut().slice_mut(c0 * self.out_p * 4..));
            let ids = Some(ids_at + 4 * c0 as u64);
            let jobs = MmaJobs { table: &self.table, experts: self.count, ids, topk, count, done: &self.done };
            if kernels == Exl3Kernels::Exact {
                launch_exact(gpu, (self.in_p, self.out_p, 1), (&self.ks, self.codebook), &jobs, &xs, &mut ys)?;
                continue;
            }
            for &k in &self.ks {
                let shape = MmaShape { in_p: self.in_p, out_p: self.out_p, k, codebook: self.codebook, rows: 1 };
                launch_mma(gpu, &shape, &jobs, &xs, &mut ys, part)?;
            }
        }
        Ok(())
    }

    /// [`Exl3Experts::routed`] from bf16 rows of `k` inputs to f32 rows of `n` outputs (the model's widths, padding handled here).
    pub fn routed_bf16(
        &self,
        gpu: &'g Gpu,
        ids: &PoolBuf<'_>,
        x: &PoolBuf<'_>,
        topk: usize,
        (pairs, kernels): (usize, Exl3Kernels),
        (k, n): (usize, usize),
    ) -> Result<PoolBuf<'g>, Error> {
        let xp = rows_in(gpu, x, x_rows(pairs, topk), k, self.in_p)?;
        let mut y = gpu.pool().take((pairs * self.out_p * 4).max(4))?;
        let mut part = gpu.pool().take(self.part_bytes(pairs).max(4))?;
        self.routed(gpu, ids, &xp, topk, (&mut y, &mut part), (pairs, kernels))?;
        rows_out(gpu, y, pairs, n, self.out_p)
    }
}

/// Activation rows `pairs` routed jobs read: one per `topk` pairs (a token's row), or one per pair when `topk` is 0.
pub fn x_rows(pairs: usize, topk: usize) -> usize {
    if topk == 0 { pairs } else { pairs.div_ceil(topk) }
}

/// bf16 `[rows, k]` to f32 `[rows, k_p]`, zeros past `k` (an EXL3 linear's padded input).
pub fn rows_in<'g>(gpu: &'g Gpu, x: &PoolBuf<'_>, rows: usize, k: usize, k_p: usize) -> Result<PoolBuf<'g>, Error> {
    check_len("exl3_rows_in", "x", x, bytes("exl3_rows_in", bytes("exl3_rows_in", rows, k)?, 2)?)?;
    if k > k_p {
        return Err(Error::Launch { op: "exl3_rows_in", what: format!("{k} inputs exceed the linear's {k_p}") });
    }
    rows_copy(gpu, "exl3_rows_in", x, rows, (k, k_p), k_p)
}

/// The first `n` of each f32 row of `n_p` (`y` itself when nothing is padded).
pub fn rows_out<'g>(gpu: &'g Gpu, y: PoolBuf<'g>, rows: usize, n: usize, n_p: usize) -> Result<PoolBuf<'g>, Error> {
    if n == n_p {
        return Ok(y);
    }
    check_len("exl3_rows_out", "y", &y, bytes("exl3_rows_out", bytes("exl3_rows_out", rows, n_p)?, 4)?)?;
    if n > n_p {
        return Err(Error::Launch { op: "exl3_rows_out", what: format!("{n} outputs exceed the linear's {n_p}") });
    }
    rows_copy(gpu, "exl3_rows_out", &y, rows, (n, n_p), n)
}

/// Launches `entry(src, dst, a, b)` over `rows` blocks into a new f32 buffer of `rows × width`.
fn rows_copy<'g>(
    gpu: &'g Gpu,
    entry: &'static str,
    src: &PoolBuf<'_>,
    rows: usize,
    (a, b): (usize, usize),
    width: usize,
) -> Result<PoolBuf<'g>, Error> {
    let mut dst = gpu.pool().take((rows * width * 4).max(4))?;
    if rows > 0 {
        let f = gpu.function(&EXL3.spec(&[]), entry)?;
        let (a, b) = (as_i32(entry, "width", a)?, as_i32(entry, "padded width", b)?);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(src.dev()).arg(dst.dev_mut()).arg(&a).arg(&b);
        // SAFETY: arguments match `exl3_rows_in`/`exl3_rows_out` (src, dst, int, int); callers checked src, dst sized here.
        unsafe { launch.launch(grid1(rows, 256)) }.doing(|| format!("launching {entry} on {rows} rows"))?;
    }
    Ok(dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_split_whole_hadamard_blocks_and_cover_the_input() {
        // The test shapes, then every V4.1-Flash EXL3 linear: wq_a, wq_b, wkv, wo_b, the indexer's wq_b, Engram's wkv.
        let flash = [(5120, 1024), (1024, 32768), (5120, 512), (16384, 5120), (1024, 8192), (5120, 2560)];
        for (in_p, out_p) in
            [(5120, 2304), (2304, 5120), (256, 384), (128, 128), (7168, 128), (128, 65536)].into_iter().chain(flash)
        {
            let p = MmaPlan::new(in_p, out_p);
            assert!(p.kr > 0 && p.kr.is_multiple_of(HAD / 16), "{in_p}×{out_p}: kr {} is not whole 128-blocks", p.kr);
            let tiles = in_p / 16;
            assert!(
                p.splits * p.kr >= tiles && (p.splits - 1) * p.kr < tiles,
                "{in_p}×{out_p}: {p:?} leaves a split empty"
            );
            assert!(p.smem_bytes(8, EXL3_MMA_ROWS) <= 227 << 10, "{in_p}×{out_p}: {p:?} needs too much shared memory");
        }
        assert_eq!(MmaPlan::new(5120, 2304), MmaPlan { kr: 24, splits: 14 });
    }
}
