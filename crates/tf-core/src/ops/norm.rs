//! Elementwise and row-wise ops of the CPU reference.

use crate::formats::to_bf16;
use half::bf16;

/// RMSNorm of one row as DeepSeek computes it: `(w · (x · rsqrt(mean(x²) + eps)))` in f32, rounded to bf16.
pub fn rms_norm_bf16(x: &[bf16], w: &[bf16], eps: f32, out: &mut [bf16]) {
    assert!(x.len() == w.len() && x.len() == out.len(), "rms_norm: lengths {} {} {}", x.len(), w.len(), out.len());
    let ms = x.iter().map(|v| v.to_f32() * v.to_f32()).sum::<f32>() / x.len() as f32;
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
