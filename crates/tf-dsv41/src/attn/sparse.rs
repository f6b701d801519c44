//! Sparse single-KV-head attention with a sink (K41:296-403): online softmax over blocks of 64 listed keys.

use tf_core::bf16;
use tf_core::formats::{round_bf16, to_bf16};
use tf_core::ops::math::exp;

/// Keys per online-softmax block, as in DeepSeek's kernel; the partition changes bf16 rounding of probabilities.
pub const BLOCK: usize = 64;

/// One query head against an ordered key list (`None` = empty slot); K = V. Returns bf16 `[d]`, zeros if no key.
pub fn attend(q: &[f32], keys: &[Option<&[bf16]>], sink: f32, scale: f32, out: &mut [bf16]) {
    let d = q.len();
    let mut acc = vec![0.0f32; d];
    let mut sum_exp = 0.0f32;
    let mut m = -1e30f32;
    let mut scores = [0.0f32; BLOCK];
    for block in keys.chunks(BLOCK) {
        for (s, k) in scores.iter_mut().zip(block) {
            *s = match k {
                Some(k) => q.iter().zip(k.iter()).map(|(a, b)| a * b.to_f32()).sum::<f32>() * scale,
                None => f32::NEG_INFINITY,
            };
        }
        let prev = m;
        m = scores[..block.len()].iter().copied().fold(prev, f32::max);
        let rescale = exp(prev - m);
        let mut psum = 0.0f32;
        let mut pv = vec![0.0f32; d];
        for (s, k) in scores[..block.len()].iter().zip(block) {
            let p = exp(s - m);
            psum += p;
            if let Some(k) = k {
                let pb = round_bf16(p);
                for (a, v) in pv.iter_mut().zip(k.iter()) {
                    *a += pb * v.to_f32();
                }
            }
        }
        sum_exp = sum_exp * rescale + psum;
        for (a, b) in acc.iter_mut().zip(&pv) {
            *a = *a * rescale + b;
        }
    }
    sum_exp += exp(sink - m);
    for (o, a) in out.iter_mut().zip(&acc) {
        *o = to_bf16(a / sum_exp);
    }
}
