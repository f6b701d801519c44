//! Weights on the GPU, uploaded once from the CPU model: FP8 linears, FP4 expert sets, plain matrices and vectors.

use super::ops::{self, Io, Sum};
use crate::linear::Dense;
use crate::qlinear::QLinear;
use tf_core::bf16;
use tf_core::formats::to_bf16;
use tf_core::ops::qgemm::Fp8Weight;
use tf_cuda::ops::{Fp8Decode, WeightScale, act_quant_fp8, fp8_gemv};
use tf_cuda::{Error, Gpu, PoolBuf};
use tf_exl3::Fp4Weight;
use tf_exl3::cuda::Fp4Experts;

/// A device buffer that lives as long as the model (the GPU is opened once per process).
pub type Buf = PoolBuf<'static>;

/// bf16 rows quantized for the FP8/FP4 GEMVs: E4M3 codes and one power-of-two f32 scale per 32.
pub struct Acts {
    pub codes: Buf,
    pub scales: Buf,
    pub rows: usize,
    pub k: usize,
}

impl Acts {
    /// Quantizes `rows × k` bf16 (`x`) as the CPU's `QuantActs` does (bit-exact).
    pub fn quantize(gpu: &'static Gpu, x: &Buf, rows: usize, k: usize) -> Result<Acts, Error> {
        let mut codes = gpu.pool().take(rows * k)?;
        let mut scales = gpu.pool().take(rows * k / 32 * 4)?;
        act_quant_fp8(gpu, x, &mut codes, &mut scales, rows, k)?;
        Ok(Acts { codes, scales, rows, k })
    }
}

/// An FP8 block-scaled linear `[n, k]` with E8M0 scales per 32×32 tile.
pub struct Lin8 {
    pub w: Buf,
    pub scale: Buf,
    pub n: usize,
    pub k: usize,
}

impl Lin8 {
    pub fn upload(gpu: &'static Gpu, w: &QLinear<Fp8Weight>) -> Result<Lin8, Error> {
        let w = native(w)?;
        let (codes, scales) = w.raw();
        Ok(Lin8 {
            w: gpu.upload_exact(codes)?,
            scale: gpu.upload_exact(scales)?,
            n: w.out_features(),
            k: w.in_features(),
        })
    }

    /// f32 sums `[rows, n]` (the CPU's `forward_f32`).
    pub fn forward_f32(&self, gpu: &'static Gpu, x: &Acts) -> Result<Buf, Error> {
        let mut y = gpu.pool().take(x.rows * self.n * 4)?;
        let dims = (x.rows, self.n, self.k);
        fp8_gemv(gpu, &self.w, &self.scale, WeightScale::E8m0, &x.codes, &x.scales, &mut y, dims, Fp8Decode::Hardware)?;
        Ok(y)
    }

    /// bf16 `[rows, n]` (the CPU's `forward`: f32 sums rounded once).
    pub fn forward(&self, gpu: &'static Gpu, x: &Acts) -> Result<Buf, Error> {
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

/// One shape of FP4 experts (`[n, k/2]` codes, `[n, k/32]` scales each) and their device pointer tables, built once.
pub struct Experts4 {
    pub w: Vec<(Buf, Buf)>,
    pub n: usize,
    pub k: usize,
    table: Fp4Experts<'static, 'static>,
}

impl Experts4 {
    pub fn upload<'a>(gpu: &'static Gpu, ws: impl Iterator<Item = &'a QLinear<Fp4Weight>>) -> Result<Experts4, Error> {
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

    /// Takes `w` and builds its pointer tables (checking every expert's size).
    pub fn new(gpu: &'static Gpu, w: Vec<(Buf, Buf)>, (n, k): (usize, usize)) -> Result<Experts4, Error> {
        let refs: Vec<(&Buf, &Buf)> = w.iter().map(|(a, b)| (a, b)).collect();
        let table = Fp4Experts::new(gpu, &refs, (n, k))?;
        // SAFETY: the tables point into `w`, which this struct owns and never changes; device buffers do not move.
        let table = unsafe { table.into_detached() };
        Ok(Experts4 { w, n, k, table })
    }

    pub fn table(&self) -> &Fp4Experts<'static, 'static> {
        &self.table
    }
}

/// The native weight of a linear, or an error naming the EXL3 tensor the GPU cannot run yet.
fn native<W: crate::qlinear::Native>(q: &QLinear<W>) -> Result<&W, Error> {
    q.native().map_err(|what| Error::Launch { op: "upload", what })
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
