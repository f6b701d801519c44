//! The EXL3 prompt path: the effective weight rebuilt in fp16 on the GPU, then one cuBLASLt GEMM on the rows as they are.

use crate::cuda::{EXL3_PROMPT, as_i32, bytes, check_len};
use crate::exl3::HAD;
use crate::exl3_cuda::GpuExl3;
use crate::exl3_mma::{Exl3Experts, x_rows};
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaViewMut, DevicePtr, PushKernelArg};
use std::cell::RefCell;
use tf_cuda::blas::{Blas, Gemm};
use tf_cuda::error::DriverResultExt;
use tf_cuda::launch::{grid1, grid3};
use tf_cuda::{Error, Gpu, PoolBuf};

/// Threads per row of the prompt source's row kernels (one block per row).
const ROW_THREADS: u32 = 256;
/// Dynamic shared memory of `exl3_recon`: one 128×128 f32 block, rows padded to 129 values.
const RECON_SMEM: usize = HAD * (HAD + 1) * 4;

/// `exl3_recon` for (K, codebook), allowed its shared memory (a function attribute, not a stream operation).
fn recon_fn(gpu: &Gpu, k: usize, codebook: i32) -> Result<CudaFunction, Error> {
    let (k_s, cb_s) = (k.to_string(), codebook.to_string());
    let f = gpu.function(&EXL3_PROMPT.spec(&[("EXL3_K", &k_s), ("EXL3_CB", &cb_s)]), "exl3_recon")?;
    let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    f.set_attribute(attr, RECON_SMEM as i32)
        .doing(|| format!("allowing exl3_recon {RECON_SMEM} bytes of shared memory"))?;
    Ok(f)
}

/// Which weights one `exl3_recon` launch rebuilds: `count` of them, row `ids[z]` of `table` (row z when `ids` is 0), `experts` rows.
pub(crate) struct ReconJobs<'a, 'g> {
    pub table: &'a PoolBuf<'g>,
    pub ids: u64,
    pub experts: usize,
    pub count: usize,
}

/// Rebuilds each job's effective weight as fp16 `[in_p][out_p]` into `w` (job z at `z·in_p·out_p`); jobs of another K are left alone.
pub(crate) fn launch_recon(
    gpu: &Gpu,
    (in_p, out_p): (usize, usize),
    (k, codebook): (usize, i32),
    jobs: &ReconJobs<'_, '_>,
    w: &mut CudaViewMut<'_, u8>,
) -> Result<(), Error> {
    const OP: &str = "exl3_recon";
    let need = bytes(OP, bytes(OP, jobs.count, in_p)?, bytes(OP, out_p, 2)?)?;
    if w.len() < need {
        return Err(Error::Launch {
            op: OP,
            what: format!("w holds {} bytes, {} weights need {need}", w.len(), jobs.count),
        });
    }
    let count = u32::try_from(jobs.count).ok().filter(|&c| c <= 65535);
    let count = count.ok_or_else(|| Error::Launch { op: OP, what: format!("{} weights exceed a grid", jobs.count) })?;
    if count == 0 {
        return Ok(());
    }
    let f = recon_fn(gpu, k, codebook)?;
    let (experts, in_i, out_i) =
        (as_i32(OP, "experts", jobs.experts)?, as_i32(OP, "in", in_p)?, as_i32(OP, "out", out_p)?);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(jobs.table.dev()).arg(&jobs.ids).arg(&experts).arg(w).arg(&in_i).arg(&out_i);
    let cfg = grid3((in_p / HAD, out_p / HAD, count as usize), 256, RECON_SMEM);
    // SAFETY: arguments match exl3_recon(const Exl3Dev*, const int*, int, u16*, int, int); w holds every job's weight (checked above).
    unsafe { launch.launch(cfg) }.doing(|| format!("launching {OP} on {count} × {in_p}×{out_p} K={k}"))?;
    Ok(())
}

impl<'g> GpuExl3<'g> {
    /// The effective weight `diag(suh)·H·Q·H·diag(svh)` as fp16 `[in_p][out_p]`: `Exl3Weight::weight`'s f32 bits, rounded once.
    pub fn effective_f16(&self, gpu: &Gpu, w: &mut PoolBuf<'_>) -> Result<(), Error> {
        let jobs = ReconJobs { table: &self.table, ids: 0, experts: 1, count: 1 };
        launch_recon(gpu, (self.in_p, self.out_p), (self.k, self.codebook), &jobs, &mut w.dev_mut().slice_mut(..))
    }

    /// `y = x·W (+ bias)`, bf16 `[rows, k ≤ in_p]` to f32 `[rows, n ≤ out_p]`: W and x in fp16, f32 sums; a tolerance, not bits.
    pub fn forward_gemm(
        &self,
        gpu: &'g Gpu,
        blas: &mut Blas<'_>,
        x: &PoolBuf<'_>,
        rows: usize,
        (k, n): (usize, usize),
    ) -> Result<PoolBuf<'g>, Error> {
        const OP: &str = "exl3 forward_gemm";
        check_len(OP, "x", x, bytes(OP, bytes(OP, rows, k)?, 2)?)?;
        if k > self.in_p || n > self.out_p {
            let what = format!("{k}→{n} does not fit the linear's {}→{}", self.in_p, self.out_p);
            return Err(Error::Launch { op: OP, what });
        }
        if rows == 0 {
            return gpu.pool().take(4);
        }
        let (k_i, in_i) = (as_i32(OP, "k", k)?, as_i32(OP, "in", self.in_p)?);
        let mut xh = gpu.pool().take(bytes(OP, bytes(OP, rows, self.in_p)?, 2)?)?;
        let f = gpu.function(&EXL3_PROMPT.spec(&[]), "exl3_rows_in_h")?;
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(x.dev()).arg(xh.dev_mut()).arg(&k_i).arg(&in_i);
        // SAFETY: arguments match exl3_rows_in_h(const u16*, u16*, int, int); x checked above, xh sized here.
        unsafe { launch.launch(grid1(rows, ROW_THREADS)) }
            .doing(|| format!("launching exl3_rows_in_h on {rows} rows"))?;
        let mut w = gpu.pool().take(bytes(OP, self.in_p, self.out_p * 2)?)?;
        self.effective_f16(gpu, &mut w)?;
        let mut yq = gpu.pool().take(bytes(OP, bytes(OP, rows, self.out_p)?, 4)?)?;
        blas.gemm(Gemm::F16F32, xh.dev(), w.dev(), yq.dev_mut(), (rows, self.out_p, self.in_p))?;
        if n == self.out_p && self.bias.is_none() {
            return Ok(yq);
        }
        let mut y = gpu.pool().take(bytes(OP, bytes(OP, rows, n)?, 4)?)?;
        let bias = self.bias.as_ref().map_or(0, |b| b.dev().device_ptr(gpu.stream()).0);
        let (n_i, out_i) = (as_i32(OP, "n", n)?, as_i32(OP, "out", self.out_p)?);
        let f = gpu.function(&EXL3_PROMPT.spec(&[]), "exl3_rows_out_bias")?;
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(yq.dev()).arg(&bias).arg(y.dev_mut()).arg(&n_i).arg(&out_i);
        // SAFETY: arguments match exl3_rows_out_bias(const float*, const float*, float*, int, int); yq and y sized here, bias holds out_p.
        unsafe { launch.launch(grid1(rows, ROW_THREADS)) }
            .doing(|| format!("launching exl3_rows_out_bias on {rows} rows"))?;
        Ok(y)
    }
}

thread_local! {
    /// This thread's cuBLASLt handle per GPU (keyed by address): a model's forward runs on one thread.
    static BLAS: RefCell<Vec<(usize, Blas<'static>)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's cuBLASLt handle for `gpu`, made on first use; `f` must not call back in.
pub fn with_blas<T>(gpu: &'static Gpu, f: impl FnOnce(&mut Blas<'static>) -> Result<T, Error>) -> Result<T, Error> {
    BLAS.with(|cell| {
        let mut list = cell.borrow_mut();
        let key = gpu as *const Gpu as usize;
        let at = match list.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                list.push((key, Blas::new(gpu)?));
                list.len() - 1
            }
        };
        f(&mut list[at].1)
    })
}

impl Exl3Experts<'_, '_> {
    /// [`Exl3Experts::routed_bf16`] for prompt rows, per expert: its pairs gathered, W rebuilt in fp16, one GEMM (a bound, not bits); a bad id fails.
    pub fn routed_gemm<'g>(
        &self,
        gpu: &'g Gpu,
        blas: &mut Blas<'_>,
        ids: &PoolBuf<'_>,
        x: &PoolBuf<'_>,
        (topk, pairs): (usize, usize),
        (k, n): (usize, usize),
    ) -> Result<PoolBuf<'g>, Error> {
        const OP: &str = "exl3 routed_gemm";
        check_len(OP, "ids", ids, bytes(OP, pairs, 4)?)?;
        check_len(OP, "x", x, bytes(OP, bytes(OP, x_rows(pairs, topk), k)?, 2)?)?;
        if k > self.in_p || n > self.out_p {
            return Err(Error::Launch {
                op: OP,
                what: format!("{k}→{n} does not fit the experts' {}→{}", self.in_p, self.out_p),
            });
        }
        let mut y = gpu.pool().take(bytes(OP, bytes(OP, pairs, n)?, 4)?.max(4))?;
        if pairs == 0 {
            return Ok(y);
        }
        let host: Vec<i32> = gpu.download(ids)?;
        let mut lists: Vec<Vec<i32>> = vec![Vec::new(); self.count];
        for (p, &e) in host[..pairs].iter().enumerate() {
            let list = usize::try_from(e).ok().and_then(|e| lists.get_mut(e));
            let list = list.ok_or_else(|| Error::Launch {
                op: OP,
                what: format!("pair {p} names expert {e}, outside the table"),
            })?;
            list.push(p as i32);
        }
        let present: Vec<i32> = (0..self.count as i32).filter(|&e| !lists[e as usize].is_empty()).collect();
        let most = lists.iter().map(Vec::len).max().unwrap_or(0);
        let order: Vec<i32> = lists.iter().flatten().copied().collect();
        let (order_d, present_d) = (gpu.upload(&order)?, gpu.upload(&present)?);
        let (order_at, present_at) =
            (order_d.dev().device_ptr(gpu.stream()).0, present_d.dev().device_ptr(gpu.stream()).0);
        let mut xh = gpu.pool().take(bytes(OP, bytes(OP, most, self.in_p)?, 2)?)?;
        let mut w = gpu.pool().take(bytes(OP, self.in_p, self.out_p * 2)?)?;
        let mut yq = gpu.pool().take(bytes(OP, bytes(OP, most, self.out_p)?, 4)?)?;
        let ints = [topk, k, self.in_p, n, self.out_p].map(|v| as_i32(OP, "a launch parameter", v));
        let [topk_i, k_i, in_i, n_i, out_i] = ints;
        let (topk_i, k_i, in_i, n_i, out_i) = (topk_i?, k_i?, in_i?, n_i?, out_i?);
        let (gather, scatter) = (
            gpu.function(&EXL3_PROMPT.spec(&[]), "exl3_gather_h")?,
            gpu.function(&EXL3_PROMPT.spec(&[]), "exl3_scatter_rows")?,
        );
        let mut at = 0u64;
        for (j, &e) in present.iter().enumerate() {
            let cnt = lists[e as usize].len();
            let (pairs_at, id_at) = (order_at + 4 * at, present_at + 4 * j as u64);
            let mut launch = gpu.stream().launch_builder(&gather);
            launch.arg(x.dev()).arg(&pairs_at).arg(&topk_i).arg(xh.dev_mut()).arg(&k_i).arg(&in_i);
            // SAFETY: arguments match exl3_gather_h(const u16*, const int*, int, u16*, int, int); pairs_at holds cnt pair indices < pairs.
            unsafe { launch.launch(grid1(cnt, ROW_THREADS)) }
                .doing(|| format!("launching exl3_gather_h for expert {e}"))?;
            let jobs = ReconJobs { table: &self.table, ids: id_at, experts: self.count, count: 1 };
            launch_recon(
                gpu,
                (self.in_p, self.out_p),
                (self.k_of[e as usize], self.codebook),
                &jobs,
                &mut w.dev_mut().slice_mut(..),
            )?;
            blas.gemm(Gemm::F16F32, xh.dev(), w.dev(), yq.dev_mut(), (cnt, self.out_p, self.in_p))?;
            let mut launch = gpu.stream().launch_builder(&scatter);
            launch
                .arg(yq.dev())
                .arg(&pairs_at)
                .arg(self.table.dev())
                .arg(&id_at)
                .arg(y.dev_mut())
                .arg(&n_i)
                .arg(&out_i);
            // SAFETY: arguments match exl3_scatter_rows(const float*, const int*, const Exl3Dev*, const int*, float*, int, int); y holds pairs × n.
            unsafe { launch.launch(grid1(cnt, ROW_THREADS)) }
                .doing(|| format!("launching exl3_scatter_rows for expert {e}"))?;
            at += cnt as u64;
        }
        Ok(y)
    }
}
