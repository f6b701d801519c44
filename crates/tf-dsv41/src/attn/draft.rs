//! DSpark stage attention (dsv41 §11): the block rows attend to each other and to the ring of projected main rows.

use super::{AttnWeights, rope_bf16, sparse};
use crate::linear::Norm;
use crate::rope::Rope;
use crate::state::WindowRing;
use tf_core::bf16;
use tf_core::formats::qdq_fp8_pow2;
use tf_core::ops::qgemm::QuantActs;

impl AttnWeights {
    /// Window K=V of rows at positions `pos0..`: `fp8(rope(kv_norm(wkv(x))))`, also how main rows seed a stage's ring.
    pub fn window_kv(&self, x: &[bf16], pos0: usize, rope: &Rope, norm: Norm) -> Vec<bf16> {
        let rows = x.len() / self.wkv.in_features();
        let xq = QuantActs::new(x, rows, self.wkv.in_features());
        let mut kv = crate::linear::rms_norm_rows(&self.wkv.forward_acts(x, &xq), &self.kv_norm, norm);
        for (r, row) in kv.chunks_exact_mut(self.head_dim).enumerate() {
            rope_bf16(row, rope, pos0 + r, false);
            qdq_fp8_pow2(row, 32);
        }
        kv
    }

    /// A draft block at positions `pos0..pos0+rows`; keys are ring slots `0..min(W, pos0)` then every block row.
    pub fn forward_draft(&self, x: &[bf16], pos0: usize, ring: &WindowRing, rope: &Rope, norm: Norm) -> Vec<bf16> {
        let rows = x.len() / self.wq_a.in_features();
        let (heads, d) = (self.n_heads, self.head_dim);
        let qr = crate::linear::rms_norm_rows(&self.wq_a.forward(x, rows), &self.q_norm, norm);
        let mut q = self.wq_b.forward(&qr, rows);
        for (r, row) in q.chunks_exact_mut(heads * d).enumerate() {
            row.chunks_exact_mut(d).for_each(|h| rope_bf16(h, rope, pos0 + r, false));
        }
        let kv = self.window_kv(x, pos0, rope, norm);
        let mut keys: Vec<Option<&[bf16]>> = (0..self.window.min(pos0)).map(|i| ring.slot(i)).collect();
        keys.extend(kv.chunks_exact(d).map(Some));
        let scale = (d as f32).powf(-0.5);
        let mut o = vec![bf16::ZERO; rows * heads * d];
        for r in 0..rows {
            for h in 0..heads {
                let qf: Vec<f32> = q[(r * heads + h) * d..(r * heads + h + 1) * d].iter().map(|v| v.to_f32()).collect();
                let out = &mut o[(r * heads + h) * d..(r * heads + h + 1) * d];
                sparse::attend(&qf, &keys, self.sink[h], scale, out);
                rope_bf16(out, rope, pos0 + r, true);
            }
        }
        self.wo_b.forward(&self.grouped_out(&o, rows), rows)
    }
}
