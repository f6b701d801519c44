//! Elementwise and row-wise ops of the CPU reference.

use crate::formats::to_bf16;
use half::bf16;

/// The order of a long f32 sum of squares; `Lanes32` is the contract (nearest torch's vector lanes, docs/numerics.md), `Sequential` the earlier one, a switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SumOrder {
    /// One running sum in index order (Rust's `sum`).
    Sequential,
    /// Element i to lane i % 32 (each lane from -0.0, in index order), then lane l += lane l ^ m for m = 16, 8, 4, 2, 1 (a warp's xor shuffle); lane 0.
    #[default]
    Lanes32,
}

/// Σ v² over `x`, each product and sum rounded to f32, in `order`.
pub fn sum_squares(x: impl Iterator<Item = f32>, order: SumOrder) -> f32 {
    match order {
        SumOrder::Sequential => x.map(|v| v * v).sum::<f32>(),
        SumOrder::Lanes32 => {
            let mut lanes = [-0.0f32; 32];
            for (i, v) in x.enumerate() {
                lanes[i % 32] += v * v;
            }
            for m in [16, 8, 4, 2, 1] {
                let prev = lanes;
                for (l, lane) in lanes.iter_mut().enumerate() {
                    *lane = prev[l] + prev[l ^ m];
                }
            }
            lanes[0]
        }
    }
}

/// RMSNorm of one row, `(w · (x · rsqrt(mean(x²) + eps)))` in f32 rounded to bf16, x² summed in index order (tf-cuda's generic kernel; dsv41 passes its order to `rms_norm_bf16_in`).
pub fn rms_norm_bf16(x: &[bf16], w: &[bf16], eps: f32, out: &mut [bf16]) {
    rms_norm_bf16_in(x, w, eps, SumOrder::Sequential, out);
}

/// [`rms_norm_bf16`] with the sum of squares in `order`.
pub fn rms_norm_bf16_in(x: &[bf16], w: &[bf16], eps: f32, order: SumOrder, out: &mut [bf16]) {
    assert!(x.len() == w.len() && x.len() == out.len(), "rms_norm: lengths {} {} {}", x.len(), w.len(), out.len());
    let ms = sum_squares(x.iter().map(|v| v.to_f32()), order) / x.len() as f32;
    let r = 1.0 / (ms + eps).sqrt();
    for ((o, v), g) in out.iter_mut().zip(x).zip(w) {
        *o = to_bf16(g.to_f32() * (v.to_f32() * r));
    }
}

/// Numerically stable softmax of one row in place (f32).
pub fn softmax_in_place(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        x.fill(0.0);
        return;
    }
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = super::math::exp(*v - m);
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

/// The highest value's index; ties go to the lowest index and NaN never wins (greedy decoding).
pub fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0usize, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}
