//! A quantized linear as the checkpoint stores it: DeepSeek's block-scaled FP8/FP4, or an EXL3 trellis (issue 6).

use tf_core::formats::{f16_bits_to_f32, to_bf16};
use tf_core::ops::qgemm::{BlockScaledWeight, Fp8Weight, QuantActs, qgemm_bf16};
use tf_core::{Checkpoint, Error, Result, bf16};
use tf_exl3::Fp4Weight;
use tf_exl3::exl3::{Exl3Weight, HAD};

/// The native formats: loadable by name, `x·Wᵀ` with FP8-quantized activations.
pub trait Native: BlockScaledWeight + Sized {
    fn load_native(ck: &Checkpoint, name: &str) -> Result<Self>;
}

impl Native for Fp8Weight {
    fn load_native(ck: &Checkpoint, name: &str) -> Result<Self> {
        Fp8Weight::load(ck, name)
    }
}

impl Native for Fp4Weight {
    fn load_native(ck: &Checkpoint, name: &str) -> Result<Self> {
        Fp4Weight::load(ck, name)
    }
}

/// An EXL3 linear for `[out, inp]` (stored `(in_p, out_p)`, padded to 128), with `Q` decoded once at load.
#[derive(Clone, Debug)]
pub struct Exl3Linear {
    pub name: String,
    pub w: Exl3Weight,
    pub inp: usize,
    pub out: usize,
    q: Vec<f32>,
}

impl Exl3Linear {
    /// `y = x·W_eff (+ bias)` in f32, the Hadamard steps as the format defines; padded inputs are zeros.
    pub fn forward_f32(&self, x: &[bf16], rows: usize) -> Vec<f32> {
        let (in_p, out_p) = (self.w.in_p, self.w.out_p);
        let mut xp = vec![0.0f32; rows * in_p];
        for (d, s) in xp.chunks_exact_mut(in_p).zip(x.chunks_exact(self.inp)) {
            d.iter_mut().zip(s).for_each(|(d, v)| *d = v.to_f32());
        }
        let y = self.w.forward_q(&self.q, &xp, rows);
        y.chunks_exact(out_p).flat_map(|r| r[..self.out].iter().copied()).collect()
    }
}

/// One linear of the model in its stored format.
#[derive(Clone, Debug)]
pub enum QLinear<W> {
    Native(W),
    Exl3(Box<Exl3Linear>),
}

impl<W: Native> QLinear<W> {
    /// `{name}.trellis` (EXL3) if present, else the native `{name}.weight`/`.scale`; either must hold `[out, inp]`.
    pub fn load(ck: &Checkpoint, name: &str, out: usize, inp: usize) -> Result<QLinear<W>> {
        if ck.contains(&format!("{name}.trellis")) {
            let w = Exl3Weight::load(ck, name)?;
            if w.in_p < inp || w.in_p >= inp + HAD || w.out_p < out || w.out_p >= out + HAD {
                let msg =
                    format!("{}×{} does not pad [{out}, {inp}] (as in × out) to multiples of {HAD}", w.in_p, w.out_p);
                return Err(Error::Invalid(format!("tensor `{name}.trellis`: {msg}")));
            }
            let q = w.decode_q().into_iter().map(f16_bits_to_f32).collect();
            return Ok(QLinear::Exl3(Box::new(Exl3Linear { name: name.to_string(), w, inp, out, q })));
        }
        let w = W::load_native(ck, name)?;
        if (w.out_features(), w.in_features()) != (out, inp) {
            let found = vec![w.out_features(), w.in_features()];
            return Err(Error::ShapeMismatch { name: format!("{name}.weight"), expected: vec![out, inp], found });
        }
        Ok(QLinear::Native(w))
    }

    pub fn out_features(&self) -> usize {
        match self {
            QLinear::Native(w) => w.out_features(),
            QLinear::Exl3(e) => e.out,
        }
    }

    pub fn in_features(&self) -> usize {
        match self {
            QLinear::Native(w) => w.in_features(),
            QLinear::Exl3(e) => e.inp,
        }
    }

    /// `x·Wᵀ` of `rows` bf16 rows in f32.
    pub fn forward_f32(&self, x: &[bf16], rows: usize) -> Vec<f32> {
        match self {
            QLinear::Native(w) => tf_core::ops::qgemm::qgemm_f32(w, &QuantActs::new(x, rows, w.in_features())),
            QLinear::Exl3(e) => e.forward_f32(x, rows),
        }
    }

    /// `x·Wᵀ` rounded to bf16.
    pub fn forward(&self, x: &[bf16], rows: usize) -> Vec<bf16> {
        self.forward_f32(x, rows).into_iter().map(to_bf16).collect()
    }

    /// As [`QLinear::forward`] when the FP8 activations `xq` of `x` are already at hand (shared by several linears).
    pub fn forward_acts(&self, x: &[bf16], xq: &QuantActs) -> Vec<bf16> {
        match self {
            QLinear::Native(w) => qgemm_bf16(w, xq),
            QLinear::Exl3(e) => e.forward_f32(x, x.len() / e.inp).into_iter().map(to_bf16).collect(),
        }
    }

    /// The native weight, or an error naming the EXL3 tensor for paths that do not take EXL3 yet (the GPU).
    pub fn native(&self) -> std::result::Result<&W, NotNative> {
        match self {
            QLinear::Native(w) => Ok(w),
            QLinear::Exl3(e) => Err(NotNative { tensor: e.name.clone() }),
        }
    }
}

/// A linear stored as EXL3 where a path needs DeepSeek's native format.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{tensor}` is EXL3, which the CUDA backend does not run yet")]
pub struct NotNative {
    pub tensor: String,
}

/// A small EXL3 linear run as a plain f32 matrix (compressor, index keys, `wo_a` slices): `[out, inp]`, `None` without `{name}.trellis`.
pub fn exl3_dense(ck: &Checkpoint, name: &str, out: usize, inp: usize) -> Result<Option<crate::linear::Dense>> {
    if !ck.contains(&format!("{name}.trellis")) {
        return Ok(None);
    }
    let QLinear::Exl3(e) = QLinear::<Fp8Weight>::load(ck, name, out, inp)? else {
        unreachable!("a trellis loads as EXL3")
    };
    Ok(Some(crate::linear::Dense { out, inp, w: e.effective() }))
}

impl Exl3Linear {
    /// The effective weight `[out, inp]` in f32 (the trellis decoded, Hadamard steps applied, padding dropped).
    pub fn effective(&self) -> Vec<f32> {
        let w_eff = self.w.weight();
        (0..self.out * self.inp).map(|t| w_eff[(t % self.inp) * self.w.out_p + t / self.inp]).collect()
    }
}

impl QLinear<Fp4Weight> {
    /// An MXFP4 copy (E2M1 codes, E8M0 scale per 32, as the official checkpoint's experts) of an EXL3 linear; `None` for a native one.
    pub fn mxfp4_copy(&self) -> Result<Option<Fp4Weight>> {
        let QLinear::Exl3(e) = self else { return Ok(None) };
        if !e.inp.is_multiple_of(32) {
            return Err(Error::Invalid(format!("{}: {} inputs do not split into MXFP4 blocks of 32", e.name, e.inp)));
        }
        let (codes, scales) = crate::wquant::quant_fp4(&e.effective(), e.out, e.inp);
        let weight = tf_core::Tensor::from_bytes(tf_core::DType::I8, &[e.out, e.inp / 2], &codes)?;
        let scale = tf_core::Tensor::from_bytes(tf_core::DType::F8E8M0, &[e.out, e.inp / 32], &scales)?;
        Fp4Weight::from_tensors(&e.name, &weight, &scale).map(Some)
    }
}
