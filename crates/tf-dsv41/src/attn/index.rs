//! The lightning indexer (dsv41 §6.5): bf16 ReLU scores, the candidate pre-filter, and top-k selection.

use super::{AttnWeights, rope_bf16};
use crate::rope::Rope;
use crate::tp::by_rows_sized;
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

/// What an index source scores: its normed inputs and q latents, the keys, and how many groups each row sees.
pub(crate) struct IndexInput<'a> {
    pub x: &'a [bf16],
    pub qr: &'a [bf16],
    pub rope: &'a Rope,
    pub keys: &'a [Vec<bf16>],
    pub pos0: usize,
    pub ratio: usize,
}

impl AttnWeights {
    /// Scores every row against the visible index keys and returns each row's selection (ascending); a share of rows per rank under a row share.
    pub(crate) fn select(&self, inp: &IndexInput<'_>, shared: &mut Shared) -> Vec<Vec<usize>> {
        let rows = inp.qr.len() / self.indexer.as_ref().expect("select runs on index sources").wq_b.in_features();
        let picked = match self.sp.as_ref().filter(|sp| sp.splits(rows)) {
            Some(_) => self.select_shared(inp, shared, rows),
            None => self.select_rows(inp, shared, 0..rows),
        };
        let mut out = Vec::with_capacity(rows);
        for (r, (sel, mask)) in picked.into_iter().enumerate() {
            if self.is_candidate_source {
                if shared.candidates.len() <= r {
                    shared.candidates.resize(r + 1, Vec::new());
                }
                shared.candidates[r] = mask;
            }
            out.push(sel);
        }
        out
    }

    /// [`select_rows`] of every rank's rows: each row travels as its selection, then (candidate source) its kept blocks in fixed slots, −1 for none.
    fn select_shared(&self, inp: &IndexInput<'_>, shared: &Shared, rows: usize) -> Vec<(Vec<usize>, Vec<bool>)> {
        let block = self.candidate_block.max(1);
        let cl = |r: usize| visible_groups(inp.pos0 + r, inp.ratio);
        let sel = |r: usize| self.index_topk.min(cl(r));
        let slots =
            |r: usize| if self.is_candidate_source { self.candidate_blocks.min(cl(r).div_ceil(block)) } else { 0 };
        let wire = by_rows_sized(self.sp.as_ref(), rows, &|r| sel(r) + slots(r), |own| {
            let mut out = Vec::new();
            for (r, (s, m)) in own.clone().zip(self.select_rows(inp, shared, own)) {
                debug_assert!(s.iter().all(|&g| g < 1 << 24), "group ids travel exactly in f32");
                out.extend(s.iter().map(|&g| g as f32));
                let kept = (0..m.len().div_ceil(block)).filter(|&b| m[b * block]).map(|b| b as f32);
                out.extend(kept.chain(std::iter::repeat(-1.0)).take(slots(r)));
            }
            out
        });
        let mut at = 0;
        let mut out = Vec::with_capacity(rows);
        for r in 0..rows {
            let s = wire[at..at + sel(r)].iter().map(|&g| g as usize).collect();
            let mut mask = vec![false; if self.is_candidate_source { cl(r) } else { 0 }];
            for &b in wire[at + sel(r)..at + sel(r) + slots(r)].iter().filter(|&&b| b >= 0.0) {
                let b = b as usize;
                mask[b * block..((b + 1) * block).min(cl(r))].iter_mut().for_each(|k| *k = true);
            }
            out.push((s, mask));
            at += sel(r) + slots(r);
        }
        out
    }

    /// The selections of rows `own` and, from the candidate source, their candidate masks.
    fn select_rows(
        &self,
        inp: &IndexInput<'_>,
        shared: &Shared,
        own: std::ops::Range<usize>,
    ) -> Vec<(Vec<usize>, Vec<bool>)> {
        let (x, qr, rope) = (inp.x, inp.qr, inp.rope);
        let ix = self.indexer.as_ref().expect("select runs on index sources");
        let (heads, hd, ql, dim) = (ix.heads, ix.head_dim, ix.wq_b.in_features(), ix.weights_proj.inp);
        let n = own.len();
        let mut q = ix.wq_b.forward(&qr[own.start * ql..own.end * ql], n);
        for (r, row) in own.clone().zip(q.chunks_exact_mut(heads * hd)) {
            for head in row.chunks_exact_mut(hd) {
                rope_bf16(head, rope, inp.pos0 + r, false);
            }
            qdq_fp4(row, 32, Fp4Scale::E8m0);
        }
        let w = ix.weights_proj.forward_bf16(&x[own.start * dim..own.end * dim], n);
        let c = ((hd as f64).powf(-0.5) * (heads as f64).powf(-0.5)) as f32;
        let mut out = Vec::with_capacity(n);
        for (i, r) in own.enumerate() {
            let cl = visible_groups(inp.pos0 + r, inp.ratio);
            let wr = head_weights(&w[i * heads..(i + 1) * heads], c);
            let qrow = &q[i * heads * hd..(i + 1) * heads * hd];
            let zero = vec![bf16::ZERO; hd];
            let key = |t: usize| inp.keys.get(t).map_or(zero.as_slice(), Vec::as_slice);
            let mut score: Vec<f32> = (0..cl).map(|t| index_score(qrow, key(t), &wr, hd)).collect();
            let mut mask = Vec::new();
            if self.is_candidate_source {
                mask = candidate_mask(&score, self.candidate_blocks, self.candidate_block);
            } else if self.uses_candidates {
                apply_candidates(&mut score, &shared.candidates[r]);
            }
            out.push((top_k(&score, self.index_topk.min(cl)), mask));
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
