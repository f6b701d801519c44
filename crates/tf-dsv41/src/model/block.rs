//! One block on a set of rows (dsv41 §2, §8): Engram, then attention and MoE between hc collapse and expand.

use crate::Config;
use crate::attn::{AttnCall, AttnWeights, Quirks, Shared};
use crate::config::LayerRole;
use crate::engram::EngramGate;
use crate::linear::{load_bf16_vec, rms_norm_rows};
use crate::mhc::{HcSite, hc_post, hc_pre};
use crate::moe::{Moe, MoeShape};
use crate::rope::Rope;
use crate::state::SeqState;
use tf_core::{Checkpoint, Result, bf16};

/// A backbone layer or DSpark stage.
#[derive(Debug)]
pub struct Block {
    pub role: LayerRole,
    pub attn: AttnWeights,
    pub ffn: Moe,
    pub attn_norm: Vec<bf16>,
    pub ffn_norm: Vec<bf16>,
    pub hc_attn: HcSite,
    pub hc_ffn: HcSite,
    pub engram: Option<EngramGate>,
}

/// Rows moving through the stack: the `hc`-stream state and the pre-mix each row collapses with next.
#[derive(Clone, Debug, PartialEq)]
pub struct Streams {
    pub x: Vec<bf16>,
    pub pre: Vec<Vec<f32>>,
}

impl Streams {
    /// Every row's streams collapsed with its own pre-mix (`hc_pre`), `rows × dim` bf16.
    pub fn collapse(&self, hc: usize, dim: usize) -> Vec<bf16> {
        self.pre
            .iter()
            .enumerate()
            .flat_map(|(r, p)| hc_pre(&self.x[r * hc * dim..(r + 1) * hc * dim], p, dim))
            .collect()
    }
}

/// One lane's rows of a block call: `rows` consecutive rows at positions `pos0..`, its state and selections.
pub struct LaneRows<'a> {
    pub pos0: usize,
    pub rows: usize,
    pub st: &'a mut SeqState,
    pub shared: &'a mut Shared,
}

/// Per-call settings shared by every block.
pub struct BlockCall<'a> {
    pub cfg: &'a Config,
    pub rope: &'a Rope,
    pub run_compressor: bool,
    pub quirks: Quirks,
    pub engram_ids: Option<&'a [Vec<u64>]>,
    /// This call's rows of this layer's table, fetched ahead ([`crate::model::Prefetch`]); ids it lacks come from the table.
    pub engram_rows: Option<&'a tf_engram::ChunkRows>,
}

impl Block {
    pub fn load(
        ck: &Checkpoint,
        cfg: &Config,
        role: &LayerRole,
        engram_cols: usize,
        (tables, engram_io): (&Checkpoint, Option<(tf_engram::IoMode, usize)>),
        ep: Option<(usize, usize)>,
    ) -> Result<Block> {
        let l = role.layer;
        let prefix = if role.is_dspark { format!("mtp.{}.", l - cfg.n_layers) } else { format!("layers.{l}.") };
        let (experts, topk) = cfg.moe_config(l);
        let owned = ep.map_or(0..experts, |(rank, world)| crate::tp::partition(experts, world)[rank].clone());
        let shape = MoeShape { dim: cfg.dim, inter: cfg.moe_inter_dim, experts, topk, owned };
        let hc = cfg.hc_mult;
        let engram = if !role.is_dspark && cfg.engram_layer_ids.contains(&l) {
            let k = cfg.engram_layer_ids.iter().position(|&e| e == l).expect("an engram layer");
            let io = engram_io.map(|(mode, cache)| (mode, cfg.engram_num_embeddings[k], cfg.engram_head_dim, cache));
            Some(EngramGate::load((ck, tables), &prefix, (hc, cfg.dim, engram_cols), io)?)
        } else {
            None
        };
        Ok(Block {
            role: role.clone(),
            attn: AttnWeights::load(ck, &prefix, cfg, role)?,
            ffn: Moe::load(ck, &prefix, &shape, cfg.route_scale, cfg.norm_topk_prob, cfg.swiglu_limit)?,
            attn_norm: load_bf16_vec(ck, &format!("{prefix}attn_norm.weight"), cfg.dim)?,
            ffn_norm: load_bf16_vec(ck, &format!("{prefix}ffn_norm.weight"), cfg.dim)?,
            hc_attn: HcSite::load(ck, &prefix, "attn", hc, cfg.dim)?,
            hc_ffn: HcSite::load(ck, &prefix, "ffn", hc, cfg.dim)?,
            engram,
        })
    }

    /// The normed attention input of every row: `attn_norm(hc_pre(X, pre))`.
    pub fn attn_input(&self, s: &Streams, cfg: &Config) -> Vec<bf16> {
        rms_norm_rows(&s.collapse(cfg.hc_mult, cfg.dim), &self.attn_norm, cfg.norm())
    }

    /// Adds this layer's Engram to the streams; it runs before the block's mixes and before DSpark taps (pitfall 4).
    pub fn apply_engram(&self, s: &mut Streams, call: &BlockCall<'_>) -> Result<()> {
        if let (Some(g), Some(ids)) = (&self.engram, call.engram_ids) {
            let refs: Vec<&[u64]> = ids.iter().map(Vec::as_slice).collect();
            g.forward(&mut s.x, &refs, None, call.cfg.norm_eps, call.engram_rows)?;
        }
        Ok(())
    }

    /// Attention (each lane on its own rows) then MoE (every row) between hc collapse and expand, on `s` in place.
    pub fn forward(&self, s: &mut Streams, call: &BlockCall<'_>, lanes: &mut [LaneRows<'_>]) {
        let cfg = call.cfg;
        let (hc, dim, norm) = (cfg.hc_mult, cfg.dim, cfg.norm());
        let rows = s.pre.len();
        let (iters, hc_eps) = (cfg.hc_sinkhorn_iters, cfg.hc_eps);
        let mix_a = self.hc_attn.mixes(&s.x, rows, hc, iters, norm, hc_eps);
        let a_in = self.attn_input(s, cfg);
        let mut a = Vec::with_capacity(rows * dim);
        for l in lanes.iter_mut() {
            let attn_call = AttnCall {
                role: &self.role,
                rope: call.rope,
                norm,
                pos0: l.pos0,
                run_compressor: call.run_compressor,
                quirks: call.quirks,
            };
            let at = a.len() / dim;
            a.extend(self.attn.forward(&a_in[at * dim..(at + l.rows) * dim], &attn_call, l.st, l.shared));
        }
        let width = hc * dim;
        let mut x: Vec<bf16> = (0..rows)
            .flat_map(|r| hc_post(&a[r * dim..(r + 1) * dim], &s.x[r * width..(r + 1) * width], &mix_a[r], dim))
            .collect();
        let mix_f = self.hc_ffn.mixes(&x, rows, hc, iters, norm, hc_eps);
        let f_pre: Vec<bf16> =
            (0..rows).flat_map(|r| hc_pre(&x[r * width..(r + 1) * width], &mix_a[r].pre, dim)).collect();
        let f = self.ffn.forward(&rms_norm_rows(&f_pre, &self.ffn_norm, norm), rows);
        x = (0..rows)
            .flat_map(|r| hc_post(&f[r * dim..(r + 1) * dim], &x[r * width..(r + 1) * width], &mix_f[r], dim))
            .collect();
        s.x = x;
        s.pre = mix_f.into_iter().map(|m| m.pre).collect();
    }

    /// Mean over the streams of every row (`h.mean(dim=2)`), bf16: a DSpark tap.
    pub fn stream_mean(s: &Streams, hc: usize, dim: usize) -> Vec<tf_core::bf16> {
        Block::mean_of_streams(&s.x, s.pre.len(), hc, dim)
    }

    /// Each row's mean over its `hc` streams (`x` bf16 `[rows, hc, dim]`): a DSpark tap, on either backend.
    pub fn mean_of_streams(x: &[bf16], rows: usize, hc: usize, dim: usize) -> Vec<bf16> {
        (0..rows * dim)
            .map(|k| {
                let (r, c) = (k / dim, k % dim);
                tf_core::formats::to_bf16((0..hc).map(|i| x[(r * hc + i) * dim + c].to_f32()).sum::<f32>() / hc as f32)
            })
            .collect()
    }
}
