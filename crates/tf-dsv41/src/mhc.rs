//! Manifold-constrained hyper-connections (dsv41 §8): mixes from the stream, Sinkhorn comb, collapse and expand.

use tf_core::formats::to_bf16;
use tf_core::ops::math::exp;
use tf_core::ops::{matmul_nt, sum_squares};
use tf_core::{Checkpoint, Result, bf16};

use crate::linear::{Dense, Norm, load_vec};

/// One site's parameters (`hc_attn_*` or `hc_ffn_*`): `fn` `[(2+n)·n, n·dim]`, `scale` `[3]`, `base` `[(2+n)·n]`.
#[derive(Clone, Debug)]
pub struct HcSite {
    pub func: Dense,
    pub scale: Vec<f32>,
    pub base: Vec<f32>,
}

/// Per-row coefficients of one site: `pre` and `post` `[n]`, `comb` `[n×n]` row-major (`comb[i][j]`).
#[derive(Clone, Debug, PartialEq)]
pub struct HcMix {
    pub pre: Vec<f32>,
    pub post: Vec<f32>,
    pub comb: Vec<f32>,
}

impl HcSite {
    pub fn load(ck: &Checkpoint, prefix: &str, site: &str, hc: usize, dim: usize) -> Result<HcSite> {
        let mix = (2 + hc) * hc;
        Ok(HcSite {
            func: Dense::load(ck, &format!("{prefix}hc_{site}_fn"), mix, hc * dim)?,
            scale: load_vec(ck, &format!("{prefix}hc_{site}_scale"), 3)?,
            base: load_vec(ck, &format!("{prefix}hc_{site}_base"), mix)?,
        })
    }

    /// `hc_mixes` for every row of the stream state `x` (`rows × n·dim` bf16).
    pub fn mixes(&self, x: &[bf16], rows: usize, hc: usize, iters: usize, norm: Norm, hc_eps: f32) -> Vec<HcMix> {
        let width = self.func.inp;
        let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
        let raw = matmul_nt(&xf, &self.func.w, rows, self.func.out, width);
        (0..rows)
            .map(|r| {
                let row = &xf[r * width..(r + 1) * width];
                let ms = sum_squares(row.iter().copied(), norm.sums) / width as f32;
                let rsqrt = 1.0 / (ms + norm.eps).sqrt();
                let m: Vec<f32> = raw[r * self.func.out..(r + 1) * self.func.out].iter().map(|v| v * rsqrt).collect();
                split_sinkhorn(&m, &self.scale, &self.base, hc, iters, hc_eps)
            })
            .collect()
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `hc_split_sinkhorn` (K41:406-458): the same f32 operations in the same order as DeepSeek's kernel.
pub fn split_sinkhorn(m: &[f32], scale: &[f32], base: &[f32], hc: usize, iters: usize, eps: f32) -> HcMix {
    let pre = (0..hc).map(|i| sigmoid(m[i] * scale[0] + base[i]) + eps).collect();
    let post = (0..hc).map(|i| 2.0 * sigmoid(m[hc + i] * scale[1] + base[hc + i])).collect();
    let mut c: Vec<f32> = (0..hc * hc).map(|k| m[2 * hc + k] * scale[2] + base[2 * hc + k]).collect();
    for row in c.chunks_exact_mut(hc) {
        let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        row.iter_mut().for_each(|v| *v = exp(*v - mx));
        let s: f32 = row.iter().sum();
        row.iter_mut().for_each(|v| *v = *v / s + eps);
    }
    normalize_cols(&mut c, hc, eps);
    for _ in 1..iters {
        for row in c.chunks_exact_mut(hc) {
            let s: f32 = row.iter().sum::<f32>() + eps;
            row.iter_mut().for_each(|v| *v /= s);
        }
        normalize_cols(&mut c, hc, eps);
    }
    HcMix { pre, post, comb: c }
}

fn normalize_cols(c: &mut [f32], hc: usize, eps: f32) {
    for j in 0..hc {
        let s: f32 = (0..hc).map(|i| c[i * hc + j]).sum::<f32>() + eps;
        (0..hc).for_each(|i| c[i * hc + j] /= s);
    }
}

/// Collapses one row's `n` streams with `pre` (f32 sum in stream order, then bf16).
pub fn hc_pre(x: &[bf16], pre: &[f32], dim: usize) -> Vec<bf16> {
    (0..dim).map(|c| to_bf16(pre.iter().enumerate().map(|(i, p)| p * x[i * dim + c].to_f32()).sum())).collect()
}

/// Expands a sublayer output back into `n` streams: `X'_j = post_j·y + Σ_i comb[i][j]·X_i` (pitfall 3), bf16.
pub fn hc_post(y: &[bf16], x: &[bf16], mix: &HcMix, dim: usize) -> Vec<bf16> {
    let hc = mix.post.len();
    let mut out = vec![bf16::ZERO; hc * dim];
    for j in 0..hc {
        for c in 0..dim {
            let mixed: f32 = (0..hc).map(|i| mix.comb[i * hc + j] * x[i * dim + c].to_f32()).sum();
            out[j * dim + c] = to_bf16(mix.post[j] * y[c].to_f32() + mixed);
        }
    }
    out
}
