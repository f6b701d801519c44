//! The lightning indexer (dsv41 §6.5): bf16 ReLU scores, the candidate pre-filter, and top-k selection.

use super::{AttnWeights, rope_bf16};
use crate::rope::Rope;
use tf_core::bf16;
use tf_core::formats::{Fp4Scale, qdq_fp4, round_bf16};

/// What one forward's index sources hand to later layers, one entry per row of the forward.
#[derive(Clone, Debug, Default)]
pub struct Shared {
    /// Selected compressed group indices per row, ascending, keyed by the index source that chose them.
    pub topk: std::collections::BTreeMap<usize, Vec<Vec<usize>>>,
    /// Candidate mask over compressed positions per row, from the candidate source.
    pub candidates: Vec<Vec<bool>>,
}

/// Index keys a layer scores against, and how many groups each row sees.
pub(crate) struct IndexInput<'a> {
    pub keys: &'a [Vec<bf16>],
    pub pos0: usize,
    pub ratio: usize,
}

impl AttnWeights {
    /// Scores every row against the visible index keys and returns each row's selection (ascending).
    pub(crate) fn select(
        &self,
        x: &[bf16],
        qr: &[bf16],
        inp: &IndexInput<'_>,
        rope: &Rope,
        shared: &mut Shared,
    ) -> Vec<Vec<usize>> {
        let ix = self.indexer.as_ref().expect("select runs on index sources");
        let rows = qr.len() / ix.wq_b.in_features();
        let (heads, hd) = (ix.heads, ix.head_dim);
        let mut q = ix.wq_b.forward(qr, rows);
        for (r, row) in q.chunks_exact_mut(heads * hd).enumerate() {
            for head in row.chunks_exact_mut(hd) {
                rope_bf16(head, rope, inp.pos0 + r, false);
            }
            qdq_fp4(row, 32, Fp4Scale::E8m0);
        }
        let w = ix.weights_proj.forward_bf16(x, rows);
        let c = ((hd as f64).powf(-0.5) * (heads as f64).powf(-0.5)) as f32;
        let mut out = Vec::with_capacity(rows);
        for r in 0..rows {
            let cl = visible_groups(inp.pos0 + r, inp.ratio);
            let wr = head_weights(&w[r * heads..(r + 1) * heads], c);
            let qrow = &q[r * heads * hd..(r + 1) * heads * hd];
            let zero = vec![bf16::ZERO; hd];
            let key = |t: usize| inp.keys.get(t).map_or(zero.as_slice(), Vec::as_slice);
            let mut score: Vec<f32> = (0..cl).map(|t| index_score(qrow, key(t), &wr, hd)).collect();
            if self.is_candidate_source {
                let mask = candidate_mask(&score, self.candidate_blocks, self.candidate_block);
                if shared.candidates.len() <= r {
                    shared.candidates.resize(r + 1, Vec::new());
                }
                shared.candidates[r] = mask;
            } else if self.uses_candidates {
                apply_candidates(&mut score, &shared.candidates[r]);
            }
            out.push(top_k(&score, self.index_topk.min(cl)));
        }
        out
    }
}

/// Compressed groups a row at position `pos` may select: those complete by then.
pub fn visible_groups(pos: usize, ratio: usize) -> usize {
    (pos + 1) / ratio
}

/// A row's per-head score weights: `bf16(w_h · c)` with `c = hd^-0.5 · heads^-0.5`.
pub fn head_weights(w: &[bf16], c: f32) -> Vec<f32> {
    w.iter().map(|v| round_bf16(v.to_f32() * c)).collect()
}

/// Scores of groups outside the candidate source's mask become -inf; groups past the mask's length keep theirs.
pub fn apply_candidates(score: &mut [f32], keep: &[bool]) {
    for (s, keep) in score.iter_mut().zip(keep) {
        if !keep {
            *s = f32::NEG_INFINITY;
        }
    }
}

/// `Σ_h bf16(relu(bf16(q_h·k)) · w_h)` summed in f32 and rounded to bf16, the reference's rounding points.
pub fn index_score(q: &[bf16], k: &[bf16], w: &[f32], hd: usize) -> f32 {
    let mut total = 0.0f32;
    for (h, qh) in q.chunks_exact(hd).enumerate() {
        let dot = round_bf16(qh.iter().zip(k).map(|(a, b)| a.to_f32() * b.to_f32()).sum::<f32>());
        total += round_bf16(dot.max(0.0) * w[h]);
    }
    round_bf16(total)
}

/// Indices of the `k` best scores (ties: lower position first), returned in ascending order.
pub fn top_k(score: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..score.len()).collect();
    idx.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx.sort_unstable();
    idx
}

/// `f32::max` with +0 over −0 (and NaN ignored), so a ±0 tie picks the same block on every platform.
fn block_max(m: f32, v: f32) -> f32 {
    if v > m || (v == m && v.is_sign_positive()) { v } else { m }
}

/// Level one of the two-level top-k: keep the best blocks (max score per block), the newest block pinned.
pub fn candidate_mask(score: &[f32], topk_blocks: usize, block: usize) -> Vec<bool> {
    let n = score.len();
    let nb = n.div_ceil(block);
    let mut bs: Vec<f32> = (0..nb)
        .map(|b| score[b * block..((b + 1) * block).min(n)].iter().copied().fold(f32::NEG_INFINITY, block_max))
        .collect();
    if n > 0 {
        bs[(n - 1) / block] = f32::INFINITY;
    }
    let mut keep = vec![false; n];
    for b in top_k(&bs, topk_blocks.min(nb)) {
        if bs[b] > f32::NEG_INFINITY {
            keep[b * block..((b + 1) * block).min(n)].iter_mut().for_each(|k| *k = true);
        }
    }
    keep
}
