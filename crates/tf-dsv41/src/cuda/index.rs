//! The lightning indexer of attention on the GPU (dsv41 §6): one lane's selection, or every lane's in one launch per kernel.

use super::attn::{LaneAttn, Pick};
use super::model::GpuModel;
use super::ops;
use super::weights::Buf;
use crate::config::LayerRole;
use tf_cuda::Error;

impl GpuModel {
    /// Runs the indexer of every lane picked for it (`Pick::Index`), in one launch per kernel with `joint_lanes`; keeps each selection in `shared.sel`.
    pub(super) fn select_lanes(
        &self,
        role: &LayerRole,
        ix: &(Buf, Buf),
        lanes: &mut [LaneAttn<'_>],
        picks: &[Pick],
    ) -> Result<(), Error> {
        if lanes.len() == 1 || !self.opts.joint_lanes {
            let mut at = 0;
            for (l, p) in lanes.iter_mut().zip(picks) {
                if let Pick::Index(key_owner) = p {
                    let sel = self.select(role, (ix, at), l, *key_owner)?;
                    l.shared.sel.insert(role.layer, sel);
                }
                at += l.call.rows;
            }
            return Ok(());
        }
        let (gpu, cfg, ratio) = (self.gpu, self.cfg(), role.ratio);
        let (heads, hd, topk) = (cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk);
        let c = ((hd as f64).powf(-0.5) * (heads as f64).powf(-0.5)) as f32;
        // Per lane: its first row in q and w, its key owner when indexed, and its scores when it sees any group.
        let mut at = 0;
        let mut plan: Vec<(usize, Option<usize>, Option<Buf>)> = Vec::with_capacity(lanes.len());
        for (l, p) in lanes.iter().zip(picks) {
            let (rows, cap) = (l.call.rows, (l.call.pos0 + l.call.rows) / ratio);
            let owner = if let Pick::Index(k) = p { Some(*k) } else { None };
            let scores = match owner.is_some() && cap > 0 {
                true => Some(gpu.pool().take(rows * cap * 4)?),
                false => None,
            };
            plan.push((at, owner, scores));
            at += rows;
        }
        let mut parts = Vec::with_capacity(lanes.len());
        for (l, (at, owner, scores)) in lanes.iter().zip(plan.iter_mut()) {
            let (Some(k), Some(scores)) = (*owner, scores.as_mut()) else { continue };
            let cache = l.lane.compressed[k].as_ref().expect("key owner has a cache");
            let keys = cache.index_k.as_ref().expect("key owners keep index keys");
            let (pos0, rows) = (l.call.pos0, l.call.rows);
            parts.push(ops::ScoreLane {
                keys: keys.view(),
                groups: cache.groups,
                scores: scores.view_mut(),
                pos0,
                rows,
                at: *at,
            });
        }
        ops::index_scores_rows(gpu, (&ix.0.view(), &ix.1.view()), &mut parts, (heads, hd, ratio), c)?;
        drop(parts);
        let make = role.is_candidate_source;
        let mut out: Vec<Option<(Buf, Option<Buf>)>> = Vec::with_capacity(lanes.len());
        for (l, (_, owner, scores)) in lanes.iter().zip(&plan) {
            let rows = l.call.rows;
            out.push(match (owner, scores) {
                (None, _) => None,
                // A lane that sees no group yet selects nothing, as `select` does.
                (Some(_), None) => Some((gpu.upload(&vec![ops::KEY_NONE; rows * topk])?, None)),
                (Some(_), Some(_)) => {
                    let cap = (l.call.pos0 + rows) / ratio;
                    let mask = if make { Some(gpu.pool().take(rows * cap)?) } else { None };
                    Some((gpu.pool().take(rows * topk * 4)?, mask))
                }
            });
        }
        let cands = self.row_candidates(role, lanes)?;
        let mut parts = Vec::with_capacity(lanes.len());
        for ((l, (_, _, scores)), o) in lanes.iter().zip(&plan).zip(out.iter_mut()) {
            let (Some(scores), Some((sel, mask))) = (scores, o.as_mut()) else { continue };
            let mask = match (mask.as_mut(), cands) {
                (Some(m), _) => ops::LaneMask::Make(m.view_mut()),
                (None, ops::RowCandidates::Use { .. }) => {
                    let (m, _) =
                        l.shared.candidates.as_ref().expect("the candidate source runs earlier in the same forward");
                    ops::LaneMask::Use(m.view())
                }
                (None, _) => ops::LaneMask::None,
            };
            let (pos0, rows) = (l.call.pos0, l.call.rows);
            parts.push(ops::SelectLane { scores: scores.view(), mask, sel: sel.view_mut(), pos0, rows });
        }
        ops::index_select_rows(gpu, &mut parts, cands, (topk, ratio))?;
        drop(parts);
        for (l, o) in lanes.iter_mut().zip(out) {
            let Some((sel, mask)) = o else { continue };
            if make {
                // A lane with no group yet hands on an empty mask, as `select` does.
                l.shared.candidates = Some((mask.map_or_else(|| gpu.pool().take(1), Ok)?, ratio));
            }
            l.shared.sel.insert(role.layer, sel);
        }
        Ok(())
    }

    /// The candidate rule every lane of this layer shares: the source's ratio must agree across lanes.
    fn row_candidates(&self, role: &LayerRole, lanes: &[LaneAttn<'_>]) -> Result<ops::RowCandidates, Error> {
        let cfg = self.cfg();
        if role.is_candidate_source {
            return Ok(ops::RowCandidates::Make { blocks: cfg.candidate_topk_blocks, block: cfg.candidate_block_size });
        }
        if !role.uses_candidates {
            return Ok(ops::RowCandidates::None);
        }
        let ratios: Vec<usize> = lanes.iter().filter_map(|l| l.shared.candidates.as_ref().map(|c| c.1)).collect();
        match ratios.split_first() {
            Some((&r, rest)) if rest.iter().all(|&o| o == r) && ratios.len() == lanes.len() => {
                Ok(ops::RowCandidates::Use { ratio: r })
            }
            _ => Err(Error::Launch {
                op: "indexer of several lanes",
                what: format!("candidate source ratios {ratios:?}"),
            }),
        }
    }

    /// The lightning indexer of one lane: scores against the key owner's index keys, candidates, top-k as latent key ids.
    fn select(
        &self,
        role: &LayerRole,
        ((q, wts), at): (&(Buf, Buf), usize),
        l: &mut LaneAttn<'_>,
        key_owner: usize,
    ) -> Result<Buf, Error> {
        let (gpu, cfg, call, rows) = (self.gpu, self.cfg(), l.call, l.call.rows);
        let (heads, hd, topk) = (cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk);
        let ratio = role.ratio;
        let cap = (call.pos0 + rows) / ratio;
        if cap == 0 {
            if role.is_candidate_source {
                l.shared.candidates = Some((gpu.pool().take(1)?, ratio));
            }
            return gpu.upload(&vec![ops::KEY_NONE; rows * topk]);
        }
        let mut sel = gpu.pool().take(rows * topk * 4)?;
        let (qw, ww) = (heads * hd * 2, heads * 2);
        let (q, wts) = (q.view().slice(at * qw..(at + rows) * qw), wts.view().slice(at * ww..(at + rows) * ww));
        let c = ((hd as f64).powf(-0.5) * (heads as f64).powf(-0.5)) as f32;
        let cache = l.lane.compressed[key_owner].as_ref().expect("key owner has a cache");
        let keys = cache.index_k.as_ref().expect("key owners keep index keys");
        let mut scores = gpu.pool().take(rows * cap * 4)?;
        ops::index_scores(
            gpu,
            &q,
            &wts,
            &keys.view(),
            &mut scores.view_mut(),
            (rows, heads, hd, cache.groups, cap),
            (call.pos0, ratio),
            c,
        )?;
        let dims = (rows, cap, topk);
        if role.is_candidate_source {
            let mut mask = gpu.pool().take(rows * cap)?;
            let cands = ops::Candidates::Make {
                mask: &mut mask.view_mut(),
                blocks: cfg.candidate_topk_blocks,
                block: cfg.candidate_block_size,
            };
            ops::index_select(gpu, &scores.view(), cands, &mut sel.view_mut(), dims, (call.pos0, ratio))?;
            l.shared.candidates = Some((mask, ratio));
        } else if role.uses_candidates {
            let (mask, src_ratio) =
                l.shared.candidates.as_ref().expect("the candidate source runs earlier in the same forward");
            let cands = ops::Candidates::Use { mask: &mask.view(), ratio: *src_ratio };
            ops::index_select(gpu, &scores.view(), cands, &mut sel.view_mut(), dims, (call.pos0, ratio))?;
        } else {
            ops::index_select(
                gpu,
                &scores.view(),
                ops::Candidates::None,
                &mut sel.view_mut(),
                dims,
                (call.pos0, ratio),
            )?;
        }
        Ok(sel)
    }
}
