//! Plain (non-quantized) linears: bf16 weights used in bf16 or promoted to f32, as the reference declares them.

use tf_core::formats::to_bf16;
use tf_core::ops::matmul_nt;
use tf_core::ops::qgemm::{expect_dtype, expect_shape};
use tf_core::{Checkpoint, DType, Result, bf16};

/// A dense `[out, in]` weight held as f32 (exact for bf16, fp16 and f32 checkpoint tensors).
#[derive(Clone, Debug)]
pub struct Dense {
    pub out: usize,
    pub inp: usize,
    pub w: Vec<f32>,
}

impl Dense {
    /// Loads `{name}` (BF16, F32, or F16 as TensorFold's EXL3 checkpoint stores the router and `weights_proj`) checking its shape.
    pub fn load(ck: &Checkpoint, name: &str, out: usize, inp: usize) -> Result<Dense> {
        let t = ck.get(name)?;
        expect_dtype(name, &t, &[DType::BF16, DType::F32, DType::F16])?;
        expect_shape(name, &t, &[out, inp])?;
        Ok(Dense { out, inp, w: t.to_f32_vec()? })
    }

    /// `x·Wᵀ` of bf16 rows with f32 sums, rounded once to bf16 (`F.linear` on bf16).
    pub fn forward_bf16(&self, x: &[bf16], rows: usize) -> Vec<bf16> {
        let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
        matmul_nt(&xf, &self.w, rows, self.out, self.inp).into_iter().map(to_bf16).collect()
    }

    /// `x·Wᵀ` in f32 (weights the reference promotes to f32: router, ratio-2 compressor, head).
    pub fn forward_f32(&self, x: &[f32], rows: usize) -> Vec<f32> {
        matmul_nt(x, &self.w, rows, self.out, self.inp)
    }
}

/// A 1-D parameter (norm weight, bias, sink) as f32, checked for length.
pub fn load_vec(ck: &Checkpoint, name: &str, len: usize) -> Result<Vec<f32>> {
    let t = ck.get(name)?;
    expect_dtype(name, &t, &[DType::BF16, DType::F32])?;
    expect_shape(name, &t, &[len])?;
    t.to_f32_vec()
}

/// A bf16 1-D parameter kept in bf16 (norm weights multiply in f32 but are stored bf16).
pub fn load_bf16_vec(ck: &Checkpoint, name: &str, len: usize) -> Result<Vec<bf16>> {
    Ok(load_vec(ck, name, len)?.into_iter().map(to_bf16).collect())
}

/// How every RMSNorm of a model runs: its eps and the order of its sum of squares (`Config::norm`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Norm {
    pub eps: f32,
    pub sums: tf_core::ops::SumOrder,
}

impl Norm {
    /// The reference contract: a sequential sum of squares.
    pub fn sequential(eps: f32) -> Norm {
        Norm { eps, sums: tf_core::ops::SumOrder::Sequential }
    }
}

/// RMSNorm over each `dim`-row of `x` (reference `RMSNorm`: f32 statistics, bf16 out).
pub fn rms_norm_rows(x: &[bf16], w: &[bf16], norm: Norm) -> Vec<bf16> {
    let mut out = vec![bf16::ZERO; x.len()];
    for (o, r) in out.chunks_exact_mut(w.len()).zip(x.chunks_exact(w.len())) {
        tf_core::ops::rms_norm_bf16_in(r, w, norm.eps, norm.sums, o);
    }
    out
}
