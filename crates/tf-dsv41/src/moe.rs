//! MoE (dsv41 §9): sqrt-softplus router with selection-only bias, FP4 routed experts, FP8 shared expert.

use crate::linear::{Dense, load_vec};
use crate::qlinear::QLinear;
use tf_core::formats::to_bf16;
use tf_core::ops::math;
use tf_core::ops::qgemm::{Fp8Weight, QBLOCK, QuantActs, qgemm_f32_from};
use tf_core::{Checkpoint, Result, bf16};
use tf_exl3::Fp4Weight;

/// A SwiGLU expert's three projections (FP4 routed, FP8 shared).
#[derive(Clone, Debug)]
pub struct Expert<W> {
    pub w1: W,
    pub w2: W,
    pub w3: W,
}

/// One layer's MoE.
#[derive(Clone, Debug)]
pub struct Moe {
    pub gate: Dense,
    pub bias: Vec<f32>,
    pub bias_vl: Option<Vec<f32>>,
    /// The routed experts this rank holds: ids `owned`, all of them unless expert parallel.
    pub experts: Vec<Expert<QLinear<Fp4Weight>>>,
    pub owned: std::ops::Range<usize>,
    /// Expert parallel: the group the other ranks' expert outputs come from.
    pub ep: Option<crate::tp::SharedComm>,
    /// Tensor parallel by width (`Options::expert_width`): this rank's share of every routed expert's inner dimension.
    pub width: Option<Width>,
    /// Sequence-parallel rows: long calls run the shared expert a share of rows per rank.
    pub sp: Option<crate::tp::RowShare>,
    pub shared: Expert<QLinear<Fp8Weight>>,
    pub topk: usize,
    pub route_scale: f32,
    pub norm_topk: bool,
    pub limit: f32,
    /// `Options::prefill_mxfp4`: MXFP4 copies of EXL3 routed experts, used for calls of at least `min_rows` rows.
    pub prefill: Option<PrefillExperts>,
    /// `Options::expert_top_p` (tier 2): each row keeps its heaviest experts until their weights reach this share.
    pub top_p: Option<f32>,
    /// Routed picks since load, and those kept after `top_p` (a bench counts the expert reads pruning saves).
    pub picks: std::sync::Arc<PickCount>,
}

/// Counters of routed (row, expert) picks: all of them, and those `top_p` kept.
#[derive(Debug, Default)]
pub struct PickCount {
    pub routed: std::sync::atomic::AtomicU64,
    pub kept: std::sync::atomic::AtomicU64,
}

/// A width split's share: rank `rank` of `world` holds inner columns `inner` (whole 32-blocks) of every routed expert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Width {
    pub rank: usize,
    pub world: usize,
    pub inner: std::ops::Range<usize>,
}

/// MXFP4 copies of a layer's routed experts for prompt chunks (a tier-2 switch; decode keeps the stored experts).
#[derive(Clone, Debug)]
pub struct PrefillExperts {
    pub experts: Vec<Expert<QLinear<Fp4Weight>>>,
    pub min_rows: usize,
}

/// Shape of a MoE for loading.
pub struct MoeShape {
    pub dim: usize,
    pub inter: usize,
    pub experts: usize,
    pub topk: usize,
    /// Routed experts to load (expert parallel: this rank's share).
    pub owned: std::ops::Range<usize>,
}

fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { math::ln_1p(math::exp(x)) }
}

impl Moe {
    pub fn load(
        ck: &Checkpoint,
        prefix: &str,
        s: &MoeShape,
        route_scale: f32,
        norm_topk: bool,
        limit: f32,
    ) -> Result<Moe> {
        let f = format!("{prefix}ffn.");
        let mut experts = Vec::with_capacity(s.owned.len());
        for e in s.owned.clone() {
            let p = format!("{f}experts.{e}.");
            let load = |w: &str, o, i| QLinear::load(ck, &format!("{p}{w}"), o, i);
            experts.push(Expert {
                w1: load("w1", s.inter, s.dim)?,
                w2: load("w2", s.dim, s.inter)?,
                w3: load("w3", s.inter, s.dim)?,
            });
        }
        let sh = |w: &str, o, i| QLinear::load(ck, &format!("{f}shared_experts.{w}"), o, i);
        let vl = format!("{f}gate.bias_vl");
        Ok(Moe {
            gate: Dense::load(ck, &format!("{f}gate.weight"), s.experts, s.dim)?,
            bias: load_vec(ck, &format!("{f}gate.bias"), s.experts)?,
            bias_vl: if ck.contains(&vl) { Some(load_vec(ck, &vl, s.experts)?) } else { None },
            experts,
            owned: s.owned.clone(),
            ep: None,
            width: None,
            sp: None,
            shared: Expert {
                w1: sh("w1", s.inter, s.dim)?,
                w2: sh("w2", s.dim, s.inter)?,
                w3: sh("w3", s.inter, s.dim)?,
            },
            topk: s.topk,
            route_scale,
            norm_topk,
            limit,
            prefill: None,
            top_p: None,
            picks: Default::default(),
        })
    }

    /// Builds MXFP4 copies of the routed experts for calls of `min_rows` rows or more; false when they are not EXL3.
    pub fn add_mxfp4_prefill(&mut self, min_rows: usize) -> Result<bool> {
        let copy = |w: &QLinear<Fp4Weight>| w.mxfp4_copy().map(|c| c.map(QLinear::Native));
        let mut experts = Vec::with_capacity(self.experts.len());
        for e in &self.experts {
            let (Some(w1), Some(w2), Some(w3)) = (copy(&e.w1)?, copy(&e.w2)?, copy(&e.w3)?) else { return Ok(false) };
            experts.push(Expert { w1, w2, w3 });
        }
        self.prefill = Some(PrefillExperts { experts, min_rows });
        Ok(true)
    }

    /// Keeps rank `rank` of `world`'s share of every routed expert's inner dimension: `w1`/`w3` rows, `w2` columns.
    pub fn split_width(&mut self, rank: usize, world: usize, layer: &str) -> Result<()> {
        let Some(first) = self.experts.first() else { return Ok(()) };
        let blocks = crate::tp::partition(first.w1.out_features() / QBLOCK, world);
        let inner = blocks[rank].start * QBLOCK..blocks[rank].end * QBLOCK;
        let native = |w: &QLinear<Fp4Weight>, e: usize| match w.native() {
            Ok(w) => Ok(w.clone()),
            Err(_) => Err(tf_core::Error::Invalid(format!(
                "{layer}ffn.experts.{e}: routed experts split by width need the official FP4 format, not EXL3"
            ))),
        };
        for (e, ex) in self.owned.clone().zip(&mut self.experts) {
            let (w1, w2, w3) = (native(&ex.w1, e)?, native(&ex.w2, e)?, native(&ex.w3, e)?);
            ex.w1 = QLinear::Native(w1.narrow_rows(inner.clone())?);
            ex.w3 = QLinear::Native(w3.narrow_rows(inner.clone())?);
            ex.w2 = QLinear::Native(w2.narrow_cols(inner.clone())?);
        }
        self.width = Some(Width { rank, world, inner });
        Ok(())
    }

    /// Width split: each rank's share of the inner dimension, the `w2` sums chained rank to rank in K order (TP1's bits), then every rank takes them.
    fn routed_by_width(&self, x: &[bf16], picks: &dyn Fn(usize) -> Vec<(usize, f32)>, y: &mut [f32]) {
        let (Some(wd), Some(comm)) = (&self.width, &self.ep) else {
            unreachable!("routed_by_width without a width split")
        };
        let dim = self.gate.inp;
        let mut local = Vec::new();
        for (e, ex) in self.owned.clone().zip(&self.experts) {
            let picked = picks(e);
            if picked.is_empty() {
                continue;
            }
            let h = if wd.inner.is_empty() { Vec::new() } else { self.gate_up(ex, x, &picked) };
            local.push((picked, h, ex));
        }
        let mut acc = vec![0.0f32; local.iter().map(|(p, _, _)| p.len() * dim).sum()];
        // Every rank routes every row, so all see the same (possibly empty) picks and skip or talk together.
        if acc.is_empty() {
            return;
        }
        let fail = |what: &str, e: tf_collective::CommError| panic!("tensor parallel: width split {what} failed: {e}");
        if wd.rank > 0 {
            comm.with(|c| c.recv(&mut acc, wd.rank - 1)).unwrap_or_else(|e| fail("receiving the partial sums", e));
        }
        if !wd.inner.is_empty() {
            let mut at = 0;
            for (picked, h, ex) in &local {
                let n = picked.len() * dim;
                let w2 = ex.w2.native().expect("split_width keeps native experts");
                let sums = qgemm_f32_from(w2, &QuantActs::new(h, picked.len(), wd.inner.len()), &acc[at..at + n]);
                acc[at..at + n].copy_from_slice(&sums);
                at += n;
            }
        }
        if wd.rank + 1 < wd.world {
            comm.with(|c| c.send(&acc, wd.rank + 1)).unwrap_or_else(|e| fail("passing the partial sums on", e));
        }
        comm.with(|c| c.broadcast(&mut acc, wd.world - 1)).unwrap_or_else(|e| fail("sharing the sums", e));
        let down: Vec<bf16> = acc.into_iter().map(to_bf16).collect();
        let mut at = 0;
        for (picked, _, _) in &local {
            add_rows(y, picked, &down[at..at + picked.len() * dim], dim);
            at += picked.len() * dim;
        }
    }

    /// SwiGLU of expert `ex`'s gate and up projections on the `picked` rows of `x`, each times its routing weight.
    fn gate_up(&self, ex: &Expert<QLinear<Fp4Weight>>, x: &[bf16], picked: &[(usize, f32)]) -> Vec<bf16> {
        let dim = self.gate.inp;
        let xin: Vec<bf16> = picked.iter().flat_map(|(r, _)| x[r * dim..(r + 1) * dim].iter().copied()).collect();
        let ws: Vec<f32> = picked.iter().map(|(_, w)| *w).collect();
        swiglu(&ex.w1.forward(&xin, ws.len()), &ex.w3.forward(&xin, ws.len()), Some(&ws), self.limit)
    }

    /// MoE of `rows` normed rows: routed experts summed in expert order, then the shared expert, in f32; bf16 out.
    pub fn forward(&self, x: &[bf16], rows: usize) -> Vec<bf16> {
        let dim = self.gate.inp;
        let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
        let logits = self.gate.forward_f32(&xf, rows);
        let routes: Vec<Vec<(usize, f32)>> = logits
            .chunks_exact(self.gate.out)
            .map(|l| route(l, &self.bias, self.topk, self.norm_topk, self.route_scale))
            .map(|rt| match self.top_p {
                Some(p) => prune_top_p(rt, p),
                None => rt,
            })
            .collect();
        let kept: usize = routes.iter().map(Vec::len).sum();
        self.picks.routed.fetch_add((rows * self.topk) as u64, std::sync::atomic::Ordering::Relaxed);
        self.picks.kept.fetch_add(kept as u64, std::sync::atomic::Ordering::Relaxed);
        let mut y = vec![0.0f32; rows * dim];
        let experts = match &self.prefill {
            Some(p) if rows >= p.min_rows => &p.experts,
            _ => &self.experts,
        };
        let picks = |e: usize| -> Vec<(usize, f32)> {
            routes
                .iter()
                .enumerate()
                .filter_map(|(r, rt)| rt.iter().find(|(ei, _)| *ei == e).map(|(_, w)| (r, *w)))
                .collect()
        };
        if self.width.is_some() {
            self.routed_by_width(x, &picks, &mut y);
        } else {
            let mut outs = Vec::new();
            for (e, ex) in self.owned.clone().zip(experts) {
                let picked = picks(e);
                if picked.is_empty() {
                    continue;
                }
                let down = ex.w2.forward(&self.gate_up(ex, x, &picked), picked.len());
                match self.ep {
                    Some(_) => outs.push(down),
                    None => add_rows(&mut y, &picked, &down, dim),
                }
            }
            if let Some(comm) = &self.ep {
                // Every rank routes every row, so each knows which outputs every other rank sends; all are summed in expert order.
                let gathered = crate::tp::gather_experts(comm, outs, self.gate.out, &picks, dim);
                for (e, down) in gathered.iter().enumerate() {
                    add_rows(&mut y, &picks(e), down, dim);
                }
            }
        }
        let s = &self.shared;
        let down = crate::tp::by_rows(self.sp.as_ref(), rows, dim, |own| {
            let (x, n) = (&x[own.start * dim..own.end * dim], own.len());
            s.w2.forward(&swiglu(&s.w1.forward(x, n), &s.w3.forward(x, n), None, self.limit), n)
        });
        y.iter().zip(&down).map(|(a, b)| to_bf16(a + b.to_f32())).collect()
    }
}

/// Adds each picked row's expert output (bf16) into `y` in f32.
fn add_rows(y: &mut [f32], picked: &[(usize, f32)], down: &[bf16], dim: usize) {
    for (i, (r, _)) in picked.iter().enumerate() {
        y[r * dim..(r + 1) * dim].iter_mut().zip(&down[i * dim..(i + 1) * dim]).for_each(|(a, b)| *a += b.to_f32());
    }
}

/// Routing of one row (pitfall 13): the bias picks experts, weights come from unbiased sqrt-softplus scores.
pub fn route(logits: &[f32], bias: &[f32], topk: usize, norm_topk: bool, route_scale: f32) -> Vec<(usize, f32)> {
    let scores: Vec<f32> = logits.iter().map(|&l| softplus(l).sqrt()).collect();
    let mut order: Vec<usize> = (0..scores.len()).collect();
    let biased = |e: usize| scores[e] + bias[e];
    order.sort_by(|&a, &b| biased(b).total_cmp(&biased(a)).then(a.cmp(&b)));
    order.truncate(topk);
    let mut w: Vec<f32> = order.iter().map(|&e| scores[e]).collect();
    if norm_topk && topk > 1 {
        let s = w.iter().sum::<f32>() + 1e-20;
        w.iter_mut().for_each(|v| *v /= s);
    }
    w.iter_mut().for_each(|v| *v *= route_scale);
    order.into_iter().zip(w).collect()
}

/// The picks of one row whose weights, heaviest first, are needed to reach share `p` of the row's total; the rest are skipped.
pub fn prune_top_p(picks: Vec<(usize, f32)>, p: f32) -> Vec<(usize, f32)> {
    let total: f32 = picks.iter().map(|(_, w)| w).sum();
    let mut by_weight: Vec<usize> = (0..picks.len()).collect();
    by_weight.sort_by(|&a, &b| picks[b].1.total_cmp(&picks[a].1).then(a.cmp(&b)));
    let (mut keep, mut sum) = (vec![false; picks.len()], 0.0f32);
    for i in by_weight {
        keep[i] = true;
        sum += picks[i].1;
        if sum >= p * total {
            break;
        }
    }
    picks.into_iter().zip(keep).filter_map(|(pick, k)| k.then_some(pick)).collect()
}

/// `silu(min(g, L)) · clamp(u, ±L)`, times the routing weight before the down projection, rounded to bf16.
pub fn swiglu(g: &[bf16], u: &[bf16], weights: Option<&[f32]>, limit: f32) -> Vec<bf16> {
    let inter = g.len() / weights.map_or(1, <[f32]>::len).max(1);
    g.iter()
        .zip(u)
        .enumerate()
        .map(|(i, (g, u))| {
            let (mut g, mut u) = (g.to_f32(), u.to_f32());
            if limit > 0.0 {
                u = u.clamp(-limit, limit);
                g = g.min(limit);
            }
            let mut h = g / (1.0 + math::exp(-g)) * u;
            if let Some(w) = weights {
                h *= w[i / inter];
            }
            to_bf16(h)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::prune_top_p;

    #[test]
    fn top_p_keeps_the_heaviest_picks_in_their_order() {
        let picks = vec![(7, 0.1), (2, 0.6), (5, 0.3)];
        assert_eq!(prune_top_p(picks.clone(), 0.85), vec![(2, 0.6), (5, 0.3)], "0.6 + 0.3 reaches 0.85 of 1.0");
        assert_eq!(prune_top_p(picks.clone(), 0.6), vec![(2, 0.6)], "the heaviest alone reaches 0.6");
        assert_eq!(prune_top_p(picks.clone(), 1.0), picks, "a share of 1 keeps all");
        // The share is of the row's own total (route_scale and unnormalized weights alike).
        assert_eq!(prune_top_p(vec![(0, 3.0), (1, 3.0)], 0.5), vec![(0, 3.0)], "ties keep the earlier pick");
    }
}
