//! The compressor (dsv41 §6.4) and index keys (§6.5): pooled latents per group, RoPE'd and FP4 fake-quantized.

use super::{AttnWeights, rope_bf16};
use crate::linear::{Norm, rms_norm_rows};
use crate::rope::Rope;
use crate::state::CompressedCache;
use crate::tp::{by_rows, by_rows_pair};
use tf_core::bf16;
use tf_core::formats::{Fp4Scale, qdq_fp4, to_bf16};

impl AttnWeights {
    /// Feeds normed attention inputs at positions `pos0..` to the compressor; returns how many groups completed.
    pub fn compress_rows(
        &self,
        x: &[bf16],
        pos0: usize,
        cache: &mut CompressedCache,
        rope: &Rope,
        norm: Norm,
    ) -> usize {
        let c = self.compressor.as_ref().expect("compress is only called on KV sources");
        let (ratio, d) = (self.ratio, c.wkv.out);
        let rows = x.len() / c.wkv.inp;
        let inp = c.wkv.inp;
        let mut pooled: Vec<bf16> = Vec::new();
        if ratio == 1 {
            pooled = by_rows(self.sp.as_ref(), rows, d, |own| {
                c.wkv.forward_bf16(&x[own.start * inp..own.end * inp], own.len())
            });
        } else {
            // Each row's projected KV then gate, a share of rows per rank under a row share; the pooling stays in order.
            let (kv, gate) = by_rows_pair(self.sp.as_ref(), rows, (d, d), |own| {
                let xf: Vec<f32> = x[own.start * inp..own.end * inp].iter().map(|v| v.to_f32()).collect();
                let gate = c.wgate.as_ref().expect("ratio-2 compressors have a gate").forward_f32(&xf, own.len());
                (c.wkv.forward_f32(&xf, own.len()), gate)
            });
            for r in 0..rows {
                let row = (kv[r * d..(r + 1) * d].to_vec(), gate[r * d..(r + 1) * d].to_vec());
                if let Some(recent) = cache.recent.as_mut() {
                    recent.push(row.clone());
                }
                cache.open.push(row);
                if (pos0 + r + 1).is_multiple_of(ratio) {
                    pooled.extend(pool(&cache.open, d));
                    cache.open.clear();
                }
            }
        }
        let groups = pooled.len() / d;
        if groups == 0 {
            return 0;
        }
        let latents = rms_norm_rows(&pooled, &c.norm, norm);
        let first_group = cache.latents.len();
        if let Some(k) = &self.index_keys {
            let keys = rms_norm_rows(&k.wk.forward_bf16(&latents, groups), &k.norm, norm);
            for (g, key) in keys.chunks_exact(k.wk.out).enumerate() {
                let mut key = key.to_vec();
                rope_bf16(&mut key, rope, (first_group + g) * ratio, false);
                qdq_fp4(&mut key, 32, Fp4Scale::E8m0);
                cache.index_k.push(key);
            }
        }
        for (g, lat) in latents.chunks_exact(d).enumerate() {
            let mut lat = lat.to_vec();
            rope_bf16(&mut lat, rope, (first_group + g) * ratio, false);
            qdq_fp4(&mut lat, 16, Fp4Scale::E4m3);
            cache.latents.push(lat);
        }
        groups
    }
}

/// Softmax-gated pooling of one group's tokens per channel (pitfall 7), rounded to bf16 before the norm (pitfall 6).
pub fn pool(open: &[(Vec<f32>, Vec<f32>)], d: usize) -> Vec<bf16> {
    (0..d)
        .map(|c| {
            let mx = open.iter().map(|(_, g)| g[c]).fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = open.iter().map(|(_, g)| tf_core::ops::math::exp(g[c] - mx)).collect();
            let s: f32 = e.iter().sum();
            to_bf16(open.iter().zip(&e).map(|((kv, _), w)| kv[c] * (w / s)).sum())
        })
        .collect()
}
