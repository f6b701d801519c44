//! EXL3 linears on the GPU: the trellis uploaded as stored, decoded exactly, and `y = x·W` in `Exl3Weight::forward`'s order.

use crate::cuda::{EXL3, as_i32, bytes, check_len};
use crate::exl3::{Codebook, Exl3Weight, HAD, SPLIT};
use crate::exl3_mma::{
    EXL3_MMA_ROWS, Exl3Kernels, MMA_COLS, MmaJobs, MmaPlan, MmaShape, dev_row, exact_smem_bytes, fast_fn, launch_mma,
    prepare, rows_in, rows_out,
};
use cudarc::driver::{CudaView, CudaViewMut, PushKernelArg};
use tf_cuda::error::DriverResultExt;
use tf_cuda::launch::{grid, grid3};
use tf_cuda::{Error, Gpu, PoolBuf};

/// Rows one `exl3_gemv_exact` launch takes; more run as further launches (a row never depends on the others).
pub const EXL3_MAX_ROWS: usize = 8;
/// One EXL3 linear on a GPU: the `(in_p, out_p)` trellis, fp16 `suh`/`svh` and an f32 bias, as `Exl3Weight` holds them.
#[derive(Debug)]
pub struct GpuExl3<'g> {
    pub in_p: usize,
    pub out_p: usize,
    pub k: usize,
    pub(crate) codebook: i32,
    pub(crate) trellis: PoolBuf<'g>,
    pub(crate) suh: PoolBuf<'g>,
    pub(crate) svh: PoolBuf<'g>,
    pub(crate) bias: Option<PoolBuf<'g>>,
    /// One finished-split counter per 128 outputs; the last block of a group resets its counter to 0.
    done: PoolBuf<'g>,
    /// This weight as the fast kernel's one-row table.
    pub(crate) table: PoolBuf<'g>,
}

impl<'g> GpuExl3<'g> {
    /// Uploads `w` exactly as loaded (no decoding on the host).
    pub fn upload(gpu: &'g Gpu, w: &Exl3Weight) -> Result<GpuExl3<'g>, Error> {
        let (trellis, suh, svh) = (gpu.upload_exact(&w.trellis)?, gpu.upload_exact(&w.suh)?, gpu.upload_exact(&w.svh)?);
        let bias = w.bias.as_ref().map(|b| gpu.upload_exact(b)).transpose()?;
        GpuExl3::from_device(gpu, (trellis, suh, svh, bias), (w.in_p, w.out_p, w.k), w.codebook)
    }

    /// A weight from buffers already on the device (trellis I16, suh/svh fp16, bias f32), checked against `(in_p, out_p, k)`.
    pub fn from_device(
        gpu: &'g Gpu,
        (trellis, suh, svh, bias): (PoolBuf<'g>, PoolBuf<'g>, PoolBuf<'g>, Option<PoolBuf<'g>>),
        (in_p, out_p, k): (usize, usize, usize),
        codebook: Codebook,
    ) -> Result<GpuExl3<'g>, Error> {
        const OP: &str = "exl3 upload";
        if in_p == 0 || out_p == 0 || !in_p.is_multiple_of(HAD) || !out_p.is_multiple_of(HAD) {
            return Err(Error::Launch { op: OP, what: format!("{in_p}×{out_p} is not a multiple of {HAD}") });
        }
        if (out_p / 16) > 65535 || !(1..=8).contains(&k) {
            return Err(Error::Launch {
                op: OP,
                what: format!("{out_p} outputs at K={k}: outside one launch's grid or K 1..8"),
            });
        }
        let sizes = [(trellis.len(), in_p * out_p * k / 8), (suh.len(), in_p * 2), (svh.len(), out_p * 2)];
        let sizes = sizes.into_iter().chain(bias.as_ref().map(|b| (b.len(), out_p * 4)));
        if let Some((got, want)) = sizes.into_iter().find(|(got, want)| got != want) {
            return Err(Error::Launch {
                op: OP,
                what: format!("a buffer of {got} bytes where {in_p}×{out_p} K={k} needs {want}"),
            });
        }
        let cb = codebook.index() as i32;
        let table = gpu.upload_exact(&dev_row(gpu, (&trellis, &suh, &svh, bias.as_ref()), (k, cb)))?;
        prepare(gpu, k, cb, (in_p, out_p))?;
        let done = gpu.upload_exact(&vec![0u32; out_p / MMA_COLS])?;
        Ok(GpuExl3 { in_p, out_p, k, codebook: cb, trellis, suh, svh, bias, done, table })
    }

    /// `Q` as fp16 bits `[in_p][out_p]` into `q`, bit for bit `Exl3Weight::decode_q`.
    pub fn decode_q(&self, gpu: &Gpu, q: &mut PoolBuf<'_>) -> Result<(), Error> {
        const OP: &str = "exl3_decode_q";
        check_len(OP, "q", q, bytes(OP, bytes(OP, self.in_p, self.out_p)?, 2)?)?;
        let f = gpu.function(&EXL3.spec(&[]), OP)?;
        let (out_i, k_i) = (as_i32(OP, "out", self.out_p)?, as_i32(OP, "k", self.k)?);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(self.trellis.dev()).arg(q.dev_mut()).arg(&out_i).arg(&k_i).arg(&self.codebook);
        // SAFETY: arguments match `exl3_decode_q(const u16*, u16*, int, int, int)`; the grid covers the tiles, q checked above.
        unsafe { launch.launch(grid((self.in_p / 16, self.out_p / 16), 256, 0)) }
            .doing(|| format!("launching {OP} on {}×{} K={}", self.in_p, self.out_p, self.k))?;
        Ok(())
    }

    /// `y = x·W (+ bias)` for `rows` f32 rows of `in_p`, f32 `[rows, out_p]`, bit for bit `Exl3Weight::forward`.
    pub fn forward_exact(&self, gpu: &'g Gpu, x: &PoolBuf<'_>, rows: usize) -> Result<PoolBuf<'g>, Error> {
        const OP: &str = "exl3 forward_exact";
        check_len(OP, "x", x, bytes(OP, bytes(OP, rows, self.in_p)?, 4)?)?;
        let mut y = gpu.pool().take(bytes(OP, bytes(OP, rows, self.out_p)?, 4)?.max(4))?;
        let jobs = MmaJobs { table: &self.table, experts: 1, ids: None, topk: 0, count: 1, done: &self.done };
        let (xs, mut ys) = (x.dev().slice(..), y.dev_mut().slice_mut(..));
        launch_exact(gpu, (self.in_p, self.out_p, rows), (&[self.k], self.codebook), &jobs, &xs, &mut ys)?;
        Ok(y)
    }

    /// Device bytes of the weight (trellis, scales, bias).
    pub fn bytes(&self) -> usize {
        self.trellis.len() + self.suh.len() + self.svh.len() + self.bias.as_ref().map_or(0, |b| b.len())
    }

    /// The codebook index (0 3INST, 1 MCG, 2 MUL1).
    pub fn codebook(&self) -> i32 {
        self.codebook
    }

    /// This weight's row of a fast-kernel table.
    pub(crate) fn dev_row(&self, gpu: &Gpu) -> [u64; 5] {
        dev_row(gpu, (&self.trellis, &self.suh, &self.svh, self.bias.as_ref()), (self.k, self.codebook))
    }

    /// `Q` as fp16 bits through the fast path's register decode: must equal [`GpuExl3::decode_q`] bit for bit.
    pub fn decode_frag(&self, gpu: &Gpu, q: &mut PoolBuf<'_>) -> Result<(), Error> {
        const OP: &str = "exl3_decode_frag";
        check_len(OP, "q", q, bytes(OP, bytes(OP, self.in_p, self.out_p)?, 2)?)?;
        let f = fast_fn(gpu, OP, self.k, self.codebook)?;
        let out_i = as_i32(OP, "out", self.out_p)?;
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(self.trellis.dev()).arg(q.dev_mut()).arg(&out_i);
        // SAFETY: arguments match `exl3_decode_frag(const u16*, u16*, int)`; the grid covers the tiles, q checked above.
        unsafe { launch.launch(grid((self.in_p / 16, self.out_p / 16), 32, 0)) }
            .doing(|| format!("launching {OP} on {}×{} K={}", self.in_p, self.out_p, self.k))?;
        Ok(())
    }

    /// `y = x·W (+ bias)` on tensor cores, one launch per 16 rows: within a tolerance of `Exl3Weight::forward`, not bit for bit.
    pub fn forward(&self, gpu: &'g Gpu, x: &PoolBuf<'_>, rows: usize) -> Result<PoolBuf<'g>, Error> {
        let mut y = gpu.pool().take(bytes("exl3 forward", bytes("exl3 forward", rows, self.out_p)?, 4)?.max(4))?;
        let mut part = gpu.pool().take(self.part_bytes(rows).max(4))?;
        self.forward_into(gpu, x, rows, &mut y, &mut part)?;
        Ok(y)
    }

    /// bf16 `[rows, k]` (k ≤ in_p; the rest zeros) to f32 `[rows, n]` (the first n ≤ out_p outputs), through [`GpuExl3::forward`].
    pub fn forward_bf16(
        &self,
        gpu: &'g Gpu,
        x: &PoolBuf<'_>,
        rows: usize,
        (k, n): (usize, usize),
        kernels: Exl3Kernels,
    ) -> Result<PoolBuf<'g>, Error> {
        let xp = rows_in(gpu, x, rows, k, self.in_p)?;
        let y = match kernels {
            Exl3Kernels::Exact => self.forward_exact(gpu, &xp, rows)?,
            Exl3Kernels::Fast => self.forward(gpu, &xp, rows)?,
        };
        rows_out(gpu, y, rows, n, self.out_p)
    }

    /// Scratch [`GpuExl3::forward_into`] needs for `rows` rows: each split's partial sums.
    pub fn part_bytes(&self, rows: usize) -> usize {
        MmaPlan::new(self.in_p, self.out_p).splits * EXL3_MMA_ROWS.min(rows) * self.out_p * 4
    }

    /// [`GpuExl3::forward`] into caller buffers: `y` f32 `[rows, out_p]`, `part` at least `part_bytes(rows)`.
    pub fn forward_into(
        &self,
        gpu: &Gpu,
        x: &PoolBuf<'_>,
        rows: usize,
        y: &mut PoolBuf<'_>,
        part: &mut PoolBuf<'_>,
    ) -> Result<(), Error> {
        const OP: &str = "exl3_gemv_mma";
        check_len(OP, "x", x, bytes(OP, bytes(OP, rows, self.in_p)?, 4)?)?;
        check_len(OP, "y", y, bytes(OP, bytes(OP, rows, self.out_p)?, 4)?)?;
        check_len(OP, "part", part, self.part_bytes(rows))?;
        for r0 in (0..rows).step_by(EXL3_MMA_ROWS) {
            let m = EXL3_MMA_ROWS.min(rows - r0);
            let shape = MmaShape { in_p: self.in_p, out_p: self.out_p, k: self.k, codebook: self.codebook, rows: m };
            let jobs = MmaJobs { table: &self.table, experts: 1, ids: None, topk: 0, count: 1, done: &self.done };
            let xs = x.dev().slice(r0 * self.in_p * 4..);
            let mut ys = y.dev_mut().slice_mut(r0 * self.out_p * 4..);
            launch_mma(gpu, &shape, &jobs, &xs, &mut ys, part)?;
        }
        Ok(())
    }
}

/// The exact path for `jobs`, each `rows` rows, one launch per 8 rows whatever the jobs' K: Hadamard in, split sums in order ([`SPLIT`] inputs each), the splits added and Hadamard out.
pub(crate) fn launch_exact(
    gpu: &Gpu,
    (in_p, out_p, rows): (usize, usize, usize),
    (ks, codebook): (&[usize], i32),
    jobs: &MmaJobs<'_, '_>,
    x: &CudaView<'_, u8>,
    y: &mut CudaViewMut<'_, u8>,
) -> Result<(), Error> {
    const OP: &str = "exl3_gemv_exact";
    let n = jobs.count * rows;
    if y.len() < bytes(OP, bytes(OP, n, out_p)?, 4)? {
        return Err(Error::Launch {
            op: OP,
            what: format!("y holds {} bytes, {n} rows of {out_p} need more", y.len()),
        });
    }
    check_len(OP, "done", jobs.done, bytes(OP, jobs.count * (out_p / HAD), 4)?)?;
    if n == 0 {
        return Ok(());
    }
    let (splits, split_tiles) = (in_p.div_ceil(SPLIT), SPLIT / 16);
    let ints = [jobs.experts, jobs.topk, rows, in_p, out_p, split_tiles];
    let [experts, topk, rows_i, in_i, out_i, st] = ints.map(|v| as_i32(OP, "a launch parameter", v));
    let (experts, topk, rows_i, in_i, out_i, st) = (experts?, topk?, rows_i?, in_i?, out_i?, st?);
    let count = u32::try_from(jobs.count).ok().filter(|&c| c <= 65535);
    let count =
        count.ok_or_else(|| Error::Launch { op: OP, what: format!("{} jobs exceed one launch's grid", jobs.count) })?;
    let ids = jobs.ids.unwrap_or(0);
    let mut part = gpu.pool().take(n * splits * out_p * 4)?;
    // One launch for every K present (each block switches on its job's K), with the shared memory of the largest; prepare() allowed it.
    let Some(&k) = ks.iter().max() else { return Ok(()) };
    let f = fast_fn(gpu, OP, k, codebook)?;
    for r0 in (0..rows).step_by(EXL3_MAX_ROWS) {
        let m = EXL3_MAX_ROWS.min(rows - r0);
        let (r0_i, m_i) = (r0 as i32, m as i32);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(x).arg(jobs.table.dev()).arg(&ids).arg(&experts).arg(&topk).arg(&mut *y).arg(part.dev_mut());
        launch.arg(jobs.done.dev()).arg(&rows_i).arg(&r0_i).arg(&m_i).arg(&in_i).arg(&out_i).arg(&st);
        let cfg = grid3((out_p / HAD, splits, count as usize), 128, exact_smem_bytes(k, m));
        // SAFETY: arguments match exl3_gemv_exact's signature; callers checked x, y is checked above, part holds every job's splits.
        unsafe { launch.launch(cfg) }.doing(|| format!("launching {OP} on {m} rows × {in_p}×{out_p}"))?;
    }
    Ok(())
}
