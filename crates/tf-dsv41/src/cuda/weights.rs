//! Weights on the GPU, uploaded once from the CPU model: FP8 or EXL3 linears, FP4 or EXL3 expert sets, plain matrices and vectors.

use super::ops::{self, Io, Sum};
use crate::linear::Dense;
use crate::qlinear::QLinear;
use std::cell::OnceCell;
use tf_core::bf16;
use tf_core::formats::to_bf16;
use tf_core::ops::qgemm::Fp8Weight;
use tf_cuda::ops::{Fp8Decode, Fp8Kernel, WeightScale, act_quant_fp8, fp8_default_kernel, fp8_gemv, fp8_gemv_bf16};
use tf_cuda::{Error, Gpu, PoolBuf};
use tf_exl3::Fp4Weight;
use tf_exl3::cuda::{FP4_MAX_ROWS, Fp4Experts, RoutedActs, fp4_gemv_routed};
use tf_exl3::exl3_cuda::GpuExl3;
use tf_exl3::exl3_mma::{Exl3Experts, Exl3Kernels};
use tf_exl3::exl3_prompt::with_blas;
use tf_exl3::{Fp4Groups, TILE_ROWS, fp4_gemv_grouped, fp4_group};

/// A device buffer that lives as long as the model (the GPU is opened once per process).
pub type Buf = PoolBuf<'static>;

/// A linear's input: bf16 rows, quantized for the FP8/FP4 GEMVs (E4M3 codes, a power-of-two scale per 32) on first use.
pub struct Acts<'x> {
    pub x: &'x Buf,
    pub rows: usize,
    pub k: usize,
    /// Codes and scales the rows' producer wrote beside them (a norm's `rms_norm_quant`), borrowed.
    made: Option<(&'x Buf, &'x Buf)>,
    fp8: OnceCell<(Buf, Buf)>,
}

impl<'x> Acts<'x> {
    /// `rows × k` bf16 (`x`); an FP8/FP4 weight quantizes it as the CPU's `QuantActs` does (bit-exact), EXL3 reads it as is.
    pub fn new(x: &'x Buf, rows: usize, k: usize) -> Acts<'x> {
        Acts { x, rows, k, made: None, fp8: OnceCell::new() }
    }

    /// The codes and scales, if a linear quantized the rows, for another `Acts` of them.
    pub fn into_fp8(self) -> Option<(Buf, Buf)> {
        self.fp8.into_inner()
    }

    /// The E4M3 codes and scales: the producer's, else quantized once.
    pub fn fp8(&self, gpu: &'static Gpu) -> Result<(&Buf, &Buf), Error> {
        if let Some(made) = self.made {
            return Ok(made);
        }
        if self.fp8.get().is_none() {
            let mut codes = gpu.pool().take(self.rows * self.k)?;
            let mut scales = gpu.pool().take(self.rows * self.k / 32 * 4)?;
            act_quant_fp8(gpu, self.x, &mut codes, &mut scales, self.rows, self.k)?;
            let _ = self.fp8.set((codes, scales));
        }
        let (c, s) = self.fp8.get().expect("set above");
        Ok((c, s))
    }
}

/// A norm's bf16 rows `[rows, k]` and, where it wrote them (`Options::norm_codes`), their FP8 codes and scales.
pub struct Normed {
    pub x: Buf,
    pub rows: usize,
    pub k: usize,
    pub fp8: Option<(Buf, Buf)>,
}

impl Normed {
    /// The rows as a linear's input, its FP8 linears reading the norm's codes.
    pub fn acts(&self) -> Acts<'_> {
        let made = self.fp8.as_ref().map(|(c, s)| (c, s));
        Acts { x: &self.x, rows: self.rows, k: self.k, made, fp8: OnceCell::new() }
    }
}

/// How EXL3 weights run: the GEMV kernels, and from how many rows a call takes the prompt GEMM instead (tier 2, off by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exl3Run {
    pub kernels: Exl3Kernels,
    /// `Options::exl3_prompt_gemm`: calls of at least this many rows run W rebuilt in fp16 through cuBLASLt.
    pub prompt_rows: Option<usize>,
}

impl Exl3Run {
    /// Whether a call of `rows` rows takes the prompt GEMM.
    pub fn gemm(&self, rows: usize) -> bool {
        self.prompt_rows.is_some_and(|m| rows >= m)
    }
}

/// A linear's stored weight: FP8 codes with E8M0 scales per 32×32 tile, or an EXL3 trellis.
pub enum LinW {
    Fp8 { w: Buf, scale: Buf },
    Exl3(Box<GpuExl3<'static>>, Exl3Run),
}

/// A linear `[n, k]`, FP8 block-scaled or EXL3.
pub struct Lin8 {
    pub w: LinW,
    pub n: usize,
    pub k: usize,
}

impl Lin8 {
    /// The linear as stored; an EXL3 one runs through `kernels`.
    pub fn upload(gpu: &'static Gpu, q: &QLinear<Fp8Weight>, kernels: Exl3Run) -> Result<Lin8, Error> {
        if let QLinear::Exl3(e) = q {
            return Ok(Lin8 { w: LinW::Exl3(Box::new(GpuExl3::upload(gpu, &e.w)?), kernels), n: e.out, k: e.inp });
        }
        let w = native(q)?;
        let (codes, scales) = w.raw();
        let w8 = LinW::Fp8 { w: gpu.upload_exact(codes)?, scale: gpu.upload_exact(scales)? };
        Ok(Lin8 { w: w8, n: w.out_features(), k: w.in_features() })
    }

    /// Whether the weight is FP8 (its input is quantized), not EXL3.
    pub fn is_fp8(&self) -> bool {
        matches!(self.w, LinW::Fp8 { .. })
    }

    /// Device bytes of the weight.
    pub fn bytes(&self) -> usize {
        match &self.w {
            LinW::Fp8 { w, scale } => w.len() + scale.len(),
            LinW::Exl3(g, _) => g.bytes(),
        }
    }

    /// f32 sums `[rows, n]` (the CPU's `forward_f32`; EXL3 within its kernel's declared bound).
    pub fn forward_f32(&self, gpu: &'static Gpu, x: &Acts<'_>) -> Result<Buf, Error> {
        match &self.w {
            LinW::Fp8 { w, scale } => {
                let mut y = gpu.pool().take(x.rows * self.n * 4)?;
                let (codes, scales) = x.fp8(gpu)?;
                let dims = (x.rows, self.n, self.k);
                fp8_gemv(gpu, w, scale, WeightScale::E8m0, codes, scales, &mut y, dims, Fp8Decode::Hardware)?;
                Ok(y)
            }
            LinW::Exl3(g, run) if run.gemm(x.rows) => {
                with_blas(gpu, |b| g.forward_gemm(gpu, b, x.x, x.rows, (self.k, self.n)))
            }
            LinW::Exl3(g, run) => g.forward_bf16(gpu, x.x, x.rows, (self.k, self.n), run.kernels),
        }
    }

    /// bf16 `[rows, n]` (the CPU's `forward`: f32 sums rounded once).
    pub fn forward(&self, gpu: &'static Gpu, x: &Acts<'_>) -> Result<Buf, Error> {
        if let LinW::Fp8 { w, scale } = &self.w {
            let dims = (x.rows, self.n, self.k);
            let kernel = fp8_default_kernel(gpu, dims);
            // The wide and split kernels round their sums to bf16 themselves: one launch instead of the GEMV and a conversion.
            if matches!(kernel, Fp8Kernel::Wide { .. } | Fp8Kernel::Split { .. }) {
                let mut y = gpu.pool().take(x.rows * self.n * 2)?;
                let (codes, scales) = x.fp8(gpu)?;
                fp8_gemv_bf16(gpu, w, (scale, WeightScale::E8m0), codes, scales, &mut y, dims, kernel)?;
                return Ok(y);
            }
        }
        let y = self.forward_f32(gpu, x)?;
        to_bf16_buf(gpu, &y, x.rows * self.n)
    }
}

/// f32 values rounded to a new bf16 buffer.
pub fn to_bf16_buf(gpu: &'static Gpu, y: &Buf, n: usize) -> Result<Buf, Error> {
    let mut out = gpu.pool().take(n * 2)?;
    ops::f32_to_bf16(gpu, &y.view(), &mut out.view_mut(), n)?;
    Ok(out)
}

/// One shape of routed experts, FP4 (`[n, k/2]` codes, `[n, k/32]` scales each) or EXL3, with device tables built once.
pub enum Experts4 {
    Fp4 {
        w: Vec<(Buf, Buf)>,
        n: usize,
        k: usize,
        table: Fp4Experts<'static, 'static>,
    },
    /// `shared`: the table row of the layer's shared expert when it rides in the routed launches ([`Experts4::join_shared`]).
    Exl3 {
        w: Vec<GpuExl3<'static>>,
        n: usize,
        k: usize,
        table: Exl3Experts<'static, 'static>,
        kernels: Exl3Run,
        shared: Option<usize>,
    },
}

/// Routed rows one EXL3 expert launch takes; more run as further launches.
const EXL3_MAX_PAIRS: usize = 64;

impl Experts4 {
    /// The experts as stored; EXL3 ones run through `kernels`.
    pub fn upload<'a>(
        gpu: &'static Gpu,
        ws: impl Iterator<Item = &'a QLinear<Fp4Weight>>,
        kernels: Exl3Run,
    ) -> Result<Experts4, Error> {
        let ws: Vec<&QLinear<Fp4Weight>> = ws.collect();
        if let Some(QLinear::Exl3(first)) = ws.first() {
            let (n, k) = (first.out, first.inp);
            let mut w = Vec::with_capacity(ws.len());
            for q in &ws {
                let QLinear::Exl3(e) = q else {
                    return Err(Error::Launch {
                        op: "upload",
                        what: "an expert set mixes EXL3 and FP4 experts".into(),
                    });
                };
                w.push(GpuExl3::upload(gpu, &e.w)?);
            }
            return Experts4::exl3(gpu, w, (n, k), kernels);
        }
        let mut w = Vec::new();
        let (mut n, mut k) = (0, 0);
        for e in ws {
            let e = native(e)?;
            let (codes, scales) = e.raw();
            (n, k) = (e.out_features(), e.in_features());
            w.push((gpu.upload_exact(codes)?, gpu.upload_exact(scales)?));
        }
        Experts4::new(gpu, w, (n, k))
    }

    /// Takes EXL3 `w` (one shape and codebook) and builds its device table; they run through `kernels`.
    pub fn exl3(
        gpu: &'static Gpu,
        w: Vec<GpuExl3<'static>>,
        (n, k): (usize, usize),
        kernels: Exl3Run,
    ) -> Result<Experts4, Error> {
        let table = Exl3Experts::new(gpu, &w.iter().collect::<Vec<_>>(), EXL3_MAX_PAIRS)?;
        // SAFETY: the table points into `w`, which this value owns and never changes; device buffers do not move.
        let table = unsafe { table.into_detached() };
        Ok(Experts4::Exl3 { w, n, k, table, kernels, shared: None })
    }

    /// Takes FP4 `w` and builds its pointer tables (checking every expert's size).
    pub fn new(gpu: &'static Gpu, w: Vec<(Buf, Buf)>, (n, k): (usize, usize)) -> Result<Experts4, Error> {
        let refs: Vec<(&Buf, &Buf)> = w.iter().map(|(a, b)| (a, b)).collect();
        let table = Fp4Experts::new(gpu, &refs, (n, k))?;
        // SAFETY: the tables point into `w`, which this struct owns and never changes; device buffers do not move.
        let table = unsafe { table.into_detached() };
        Ok(Experts4::Fp4 { w, n, k, table })
    }

    /// Appends `shared` (EXL3, the experts' shape and codebook) as table row `len()`, so routed launches can carry it; false when it cannot.
    pub fn join_shared(&mut self, gpu: &'static Gpu, shared: &Lin8) -> Result<bool, Error> {
        let (Experts4::Exl3 { w, n, k, table, shared: row, .. }, LinW::Exl3(s, _)) = (self, &shared.w) else {
            return Ok(false);
        };
        let first = w.first().ok_or_else(|| Error::Launch { op: "upload", what: "an empty expert set".into() })?;
        if (shared.n, shared.k, s.in_p, s.out_p, s.codebook()) != (*n, *k, first.in_p, first.out_p, first.codebook()) {
            return Ok(false);
        }
        let all: Vec<&GpuExl3<'static>> = w.iter().chain([&**s]).collect();
        let joined = Exl3Experts::new(gpu, &all, EXL3_MAX_PAIRS)?;
        // SAFETY: the rows point into `w` and the shared linear's boxed weight, which the GMoe holding both owns and never changes.
        *table = unsafe { joined.into_detached() };
        *row = Some(w.len());
        Ok(true)
    }

    /// The shared expert's table row when it rides in the routed launches.
    pub fn shared_row(&self) -> Option<usize> {
        match self {
            Experts4::Exl3 { shared, .. } => *shared,
            Experts4::Fp4 { .. } => None,
        }
    }

    /// Outputs per expert.
    pub fn n(&self) -> usize {
        match self {
            Experts4::Fp4 { n, .. } | Experts4::Exl3 { n, .. } => *n,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Experts4::Fp4 { w, .. } => w.len(),
            Experts4::Exl3 { w, .. } => w.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Device bytes of one expert (the first).
    pub fn expert_bytes(&self) -> usize {
        match self {
            Experts4::Fp4 { w, .. } => w.first().map_or(0, |(w, s)| w.len() + s.len()),
            Experts4::Exl3 { w, .. } => w.first().map_or(0, GpuExl3::bytes),
        }
    }

    /// FP4 `ids` grouped by expert when they average at least `min` pairs an expert (0: never): tiles of 64 for the tiled kernel from `tiled` pairs (0: never), else of up to 8; `None`: per pair.
    pub fn group(
        &self,
        gpu: &'static Gpu,
        ids: &Buf,
        pairs: usize,
        (min, tiled): (usize, usize),
    ) -> Result<Option<Fp4Groups<'static>>, Error> {
        let experts = self.len();
        let at_least = |m: usize| m > 0 && pairs >= m * experts;
        if !matches!(self, Experts4::Fp4 { .. }) || experts == 0 || !(at_least(min) || at_least(tiled)) {
            return Ok(None);
        }
        let rows = if at_least(tiled) { TILE_ROWS } else { (pairs / experts).min(FP4_MAX_ROWS) };
        fp4_group(gpu, ids, pairs, experts, rows).map(Some)
    }

    /// `pairs` routed GEMVs, f32 `[pairs, n]`: pair p reads row p / topk of `x` when `per_token`, else row p.
    pub fn routed(
        &self,
        gpu: &'static Gpu,
        (ids, groups): (&Buf, Option<&Fp4Groups<'_>>),
        x: &Acts<'_>,
        topk: usize,
        per_token: bool,
        pairs: usize,
    ) -> Result<Buf, Error> {
        match self {
            Experts4::Fp4 { n, table, .. } => {
                let mut y = gpu.pool().take(pairs * n * 4)?;
                let acts = if per_token { RoutedActs::PerToken { topk } } else { RoutedActs::PerPair };
                let (codes, scales) = x.fp8(gpu)?;
                match groups {
                    Some(g) => fp4_gemv_grouped(gpu, table, g, (codes, scales), acts, &mut y, pairs)?,
                    None => fp4_gemv_routed(gpu, table, ids, (codes, scales), acts, &mut y, pairs)?,
                }
                Ok(y)
            }
            Experts4::Exl3 { n, k, table, kernels, .. } => {
                let token_topk = if per_token { topk } else { 0 };
                if kernels.gemm(pairs / topk.max(1)) {
                    return with_blas(gpu, |b| table.routed_gemm(gpu, b, ids, x.x, (token_topk, pairs), (*k, *n)));
                }
                table.routed_bf16(gpu, ids, x.x, token_topk, (pairs, kernels.kernels), (*k, *n))
            }
        }
    }
}

/// The native weight of a linear, or an error naming the EXL3 tensor the GPU cannot run yet.
fn native<W: crate::qlinear::Native>(q: &QLinear<W>) -> Result<&W, Error> {
    q.native().map_err(|e| Error::Launch { op: "upload", what: e.to_string() })
}

/// A plain `[n, k]` matrix kept in bf16 when every value is one (as checkpoints store them), else f32.
pub struct Mat {
    pub w: Buf,
    pub io: Io,
    pub n: usize,
    pub k: usize,
    /// The CPU's summation order for this weight.
    pub order: Sum,
}

impl Mat {
    pub fn upload(gpu: &'static Gpu, d: &Dense) -> Result<Mat, Error> {
        Mat::from_f32(gpu, &d.w, d.out, d.inp, Sum::Lanes8)
    }

    pub fn from_f32(gpu: &'static Gpu, w: &[f32], n: usize, k: usize, order: Sum) -> Result<Mat, Error> {
        let exact = w.iter().all(|v| to_bf16(*v).to_f32().to_bits() == v.to_bits());
        let (w, io) = if exact {
            let b: Vec<u16> = w.iter().map(|v| to_bf16(*v).to_bits()).collect();
            (gpu.upload_exact(&b)?, Io::Bf16)
        } else {
            (gpu.upload_exact(w)?, Io::F32)
        };
        Ok(Mat { w, io, n, k, order })
    }

    /// `x·Wᵀ` of `rows` rows (`x_io` input, `y_io` output), in `groups` block-diagonal groups.
    pub fn forward(
        &self,
        gpu: &'static Gpu,
        x: &Buf,
        x_io: Io,
        y_io: Io,
        rows: usize,
        groups: usize,
    ) -> Result<Buf, Error> {
        let width = if y_io == Io::F32 { 4 } else { 2 };
        let mut y = gpu.pool().take(rows * self.n * width)?;
        ops::dense(
            gpu,
            &x.view(),
            x_io,
            &self.w.view(),
            self.io,
            &mut y.view_mut(),
            y_io,
            (rows, self.n, self.k),
            groups,
            self.order,
        )?;
        Ok(y)
    }
}

/// A bf16 vector (norm weights).
pub fn upload_bf16(gpu: &'static Gpu, v: &[bf16]) -> Result<Buf, Error> {
    gpu.upload_exact(&v.iter().map(|x| x.to_bits()).collect::<Vec<u16>>())
}

/// An f32 vector (biases, sinks, scales).
pub fn upload_f32(gpu: &'static Gpu, v: &[f32]) -> Result<Buf, Error> {
    gpu.upload_exact(v)
}
