//! CSA2 attention (dsv41 §6): low-rank query, window K=V, compressed KV with indexer selection, sink, grouped output.

mod compress;
mod draft;
mod index;
mod load;
pub mod sparse;
mod split;

pub use compress::pool;
pub use index::{Shared, apply_candidates, candidate_mask, head_weights, index_score, top_k, visible_groups};
pub use load::{AttnWeights, Compressor, IndexKeys, Indexer};
pub use split::HeadSplit;

use crate::config::{AttnMode, LayerRole};
use crate::linear::{Norm, rms_norm_rows};
use crate::rope::Rope;
use crate::state::SeqState;
use index::IndexInput;
use tf_core::bf16;
use tf_core::formats::{qdq_fp8_pow2, to_bf16};
use tf_core::ops::qgemm::QuantActs;

/// Rotates the last rope channels of a bf16 vector in f32 and rounds back, as `apply_rotary_emb` does in place.
pub fn rope_bf16(x: &mut [bf16], rope: &Rope, pos: usize, inverse: bool) {
    let mut f: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    rope.apply(&mut f, pos, inverse);
    for (o, v) in x.iter_mut().zip(f) {
        *o = to_bf16(v);
    }
}

/// Switches that reproduce reference behaviour we otherwise fix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quirks {
    /// Score ratio-2 index sources against the last publisher's keys on steps where their group is open (§6.5).
    pub stale_index_keys: bool,
}

/// The inputs one attention call needs besides its rows.
pub struct AttnCall<'a> {
    pub role: &'a LayerRole,
    pub rope: &'a Rope,
    pub norm: Norm,
    pub pos0: usize,
    /// False on the replay pass, where the compressor already ran over every prompt row.
    pub run_compressor: bool,
    pub quirks: Quirks,
}

impl AttnWeights {
    /// Attention over `rows` normed inputs at positions `pos0..`; updates the sequence's caches, returns `rows × dim`.
    pub fn forward(&self, x: &[bf16], call: &AttnCall<'_>, st: &mut SeqState, shared: &mut Shared) -> Vec<bf16> {
        let (role, rope, pos0) = (call.role, call.rope, call.pos0);
        if role.is_dspark {
            return self.forward_draft(x, pos0, &st.windows[role.layer], rope, call.norm);
        }
        let rows = x.len() / self.wq_a.in_features();
        // Under a head split the sinks hold this rank's heads only.
        let (heads, d) = (self.sink.len(), self.head_dim);
        let (qr, mut kv) = self.front(x, rows, call.norm);
        let mut q = self.local_q(self.wq_b.forward(&qr, rows), rows);
        for (r, row) in q.chunks_exact_mut((heads * d).max(1)).enumerate() {
            row.chunks_exact_mut(d).for_each(|h| rope_bf16(h, rope, pos0 + r, false));
        }
        for (r, row) in kv.chunks_exact_mut(d).enumerate() {
            rope_bf16(row, rope, pos0 + r, false);
            qdq_fp8_pow2(row, 32);
        }
        let selection = self.compressed_selection(x, &qr, call, st, shared);
        let owner = role.kv_owner.unwrap_or(role.layer);
        let ring = &st.windows[role.layer];
        let floor = st.window_floor[role.layer];
        let empty = Vec::new();
        let latents = st.compressed[owner].as_ref().map_or(&empty, |c| &c.latents);
        let w = self.window;
        let scale = (d as f32).powf(-0.5);
        let mut o = vec![bf16::ZERO; rows * heads * d];
        for r in 0..rows {
            let p = pos0 + r;
            let lo = floor.max((p + 1).saturating_sub(w));
            let mut keys: Vec<Option<&[bf16]>> = (lo..=p)
                .map(|kp| if kp >= pos0 { Some(&kv[(kp - pos0) * d..(kp - pos0 + 1) * d]) } else { ring.get(kp) })
                .collect();
            keys.resize(w, None);
            if let Some(sel) = &selection {
                keys.extend(sel[r].iter().map(|&g| Some(latents[g].as_slice())));
            }
            let qrow = &q[r * heads * d..(r + 1) * heads * d];
            let orow = &mut o[r * heads * d..(r + 1) * heads * d];
            for h in 0..heads {
                let qf: Vec<f32> = qrow[h * d..(h + 1) * d].iter().map(|v| v.to_f32()).collect();
                sparse::attend(&qf, &keys, self.sink[h], scale, &mut orow[h * d..(h + 1) * d]);
                rope_bf16(&mut orow[h * d..(h + 1) * d], rope, p, true);
            }
        }
        for r in rows.saturating_sub(w)..rows {
            st.windows[role.layer].put(pos0 + r, kv[r * d..(r + 1) * d].to_vec());
        }
        self.output(self.grouped_out(&o, rows), rows)
    }

    /// Every row's normed low-rank query and normed KV (`wq_a`, `wkv`), a share of rows per rank under a row share.
    fn front(&self, x: &[bf16], rows: usize, norm: crate::linear::Norm) -> (Vec<bf16>, Vec<bf16>) {
        let (dim, ql, d) = (self.wq_a.in_features(), self.wq_a.out_features(), self.head_dim);
        crate::tp::by_rows_pair(self.sp.as_ref(), rows, (ql, d), |own| {
            let (x, n) = (&x[own.start * dim..own.end * dim], own.len());
            let xq = QuantActs::new(x, n, dim);
            let qr = rms_norm_rows(&self.wq_a.forward_acts(x, &xq), &self.q_norm, norm);
            (qr, rms_norm_rows(&self.wkv.forward_acts(x, &xq), &self.kv_norm, norm))
        })
    }

    /// Each row's compressed groups: selected here (index sources), reused, or none for window-only layers.
    fn compressed_selection(
        &self,
        x: &[bf16],
        qr: &[bf16],
        call: &AttnCall<'_>,
        st: &mut SeqState,
        shared: &mut Shared,
    ) -> Option<Vec<Vec<usize>>> {
        let role = call.role;
        if role.mode == AttnMode::Swa {
            return None;
        }
        let mut emitted = 0;
        if role.is_kv_source && call.run_compressor {
            let cache = st.compressed[role.layer].as_mut().expect("KV sources have a cache");
            emitted = self.compress_rows(x, call.pos0, cache, call.rope, call.norm);
        }
        if !role.is_index_source {
            let owner = role.sel_owner.expect("compressed layers have a selection owner");
            return Some(
                shared.topk.get(&owner).expect("the selection owner runs earlier in the same forward").clone(),
            );
        }
        let mut key_owner = role.kv_owner.expect("compressed layers have a KV owner");
        if role.is_kv_source && (emitted > 0 || !call.run_compressor) {
            st.last_key_publisher = Some(role.layer);
        } else if call.quirks.stale_index_keys && role.is_kv_source {
            key_owner = st.last_key_publisher.unwrap_or(key_owner);
        }
        let keys = &st.compressed[key_owner].as_ref().expect("key owner has a cache").index_k;
        let inp = IndexInput { x, qr, rope: call.rope, keys, pos0: call.pos0, ratio: self.ratio };
        let sel = self.select(&inp, shared);
        shared.topk.insert(role.layer, sel.clone());
        Some(sel)
    }

    /// `wo_a` block-diagonal over this rank's groups (each group projects only its heads), bf16 out.
    fn grouped_out(&self, o: &[bf16], rows: usize) -> Vec<bf16> {
        let gin = self.n_heads * self.head_dim / self.o_groups;
        let (rank, g) = (self.o_lora_rank, self.wo_a.len() / (self.o_lora_rank * gin));
        grouped_wo_a(o, &self.wo_a, (rows, g, rank, gin), self.wo_a_lanes8)
    }
}

/// `u[r, g, k] = bf16(Σ_i o[r, g, i] · w[g, k, i])`: grouped `wo_a`, each dot in index order or (`lanes8`) in `matmul_nt`'s 8-lane order.
pub fn grouped_wo_a(
    o: &[bf16],
    w: &[f32],
    (rows, g, rank, gin): (usize, usize, usize, usize),
    lanes8: bool,
) -> Vec<bf16> {
    assert!(o.len() == rows * g * gin && w.len() == g * rank * gin, "grouped_wo_a: {} and {} values", o.len(), w.len());
    let mut u = vec![bf16::ZERO; rows * g * rank];
    for gi in 0..g {
        let og: Vec<f32> =
            (0..rows).flat_map(|r| o[(r * g + gi) * gin..(r * g + gi + 1) * gin].iter().map(|v| v.to_f32())).collect();
        let wg = &w[gi * rank * gin..(gi + 1) * rank * gin];
        let dots = if lanes8 {
            tf_core::ops::matmul_nt(&og, wg, rows, rank, gin)
        } else {
            (0..rows * rank)
                .map(|i| {
                    og[(i / rank) * gin..][..gin].iter().zip(&wg[(i % rank) * gin..][..gin]).map(|(a, b)| a * b).sum()
                })
                .collect()
        };
        for (i, v) in dots.into_iter().enumerate() {
            u[((i / rank) * g + gi) * rank + i % rank] = to_bf16(v);
        }
    }
    u
}
