//! Attention weights by DeepSeek's reference names, checked against the config as they load.

use crate::config::{Config, LayerRole};
use crate::linear::{Dense, load_bf16_vec, load_vec};
use crate::qlinear::{QLinear, exl3_dense};
use tf_core::ops::qgemm::{Fp8Weight, expect_shape};
use tf_core::{Checkpoint, DType, Error, Result, bf16};

/// The compressor of a KV source: `wkv` (and `wgate` at ratio 2) then `norm`.
#[derive(Clone, Debug)]
pub struct Compressor {
    pub wkv: Dense,
    pub wgate: Option<Dense>,
    pub norm: Vec<bf16>,
}

/// Index-key projection of a key owner: `wk` then `k_norm`.
#[derive(Clone, Debug)]
pub struct IndexKeys {
    pub wk: Dense,
    pub norm: Vec<bf16>,
}

/// The indexer's query side: FP8 `wq_b` from the q latent and bf16 `weights_proj` from the input.
#[derive(Clone, Debug)]
pub struct Indexer {
    pub wq_b: QLinear<Fp8Weight>,
    pub weights_proj: Dense,
    pub heads: usize,
    pub head_dim: usize,
}

/// One layer's attention weights and the shape facts its forward needs.
#[derive(Clone, Debug)]
pub struct AttnWeights {
    pub n_heads: usize,
    pub head_dim: usize,
    pub window: usize,
    pub ratio: usize,
    pub o_groups: usize,
    pub o_lora_rank: usize,
    pub index_topk: usize,
    pub is_candidate_source: bool,
    pub uses_candidates: bool,
    pub candidate_blocks: usize,
    pub candidate_block: usize,
    pub wq_a: QLinear<Fp8Weight>,
    pub q_norm: Vec<bf16>,
    pub wq_b: QLinear<Fp8Weight>,
    pub wkv: QLinear<Fp8Weight>,
    pub kv_norm: Vec<bf16>,
    /// `wo_a` as bf16 values in f32, `[groups·rank, heads·head_dim/groups]`.
    pub wo_a: Vec<f32>,
    /// Each `wo_a` dot in `matmul_nt`'s 8-lane order (`Config::wo_a_lanes8`), else in index order.
    pub wo_a_lanes8: bool,
    pub wo_b: QLinear<Fp8Weight>,
    pub sink: Vec<f32>,
    pub compressor: Option<Compressor>,
    pub index_keys: Option<IndexKeys>,
    pub indexer: Option<Indexer>,
    /// This rank's share of the heads under tensor parallel (`split_heads`); `None`: every head.
    pub split: Option<super::HeadSplit>,
    /// Sequence-parallel rows (`Options::sp_rows`): long calls run the row-local projections a share of rows per rank.
    pub sp: Option<crate::tp::RowShare>,
}

/// A plain linear `{name}.weight`, or the effective weight of an EXL3 `{name}.trellis`.
fn dense(ck: &Checkpoint, name: &str, out: usize, inp: usize) -> Result<Dense> {
    match exl3_dense(ck, name, out, inp)? {
        Some(d) => Ok(d),
        None => Dense::load(ck, &format!("{name}.weight"), out, inp),
    }
}

fn fp8(ck: &Checkpoint, name: &str, out: usize, inp: usize) -> Result<QLinear<Fp8Weight>> {
    QLinear::load(ck, name, out, inp)
}

/// `wo_a` is FP8 in the HF checkpoint and bf16 after DeepSeek's converter; either way it is used as bf16.
fn load_wo_a(ck: &Checkpoint, name: &str, (g, rank): (usize, usize), inp: usize) -> Result<Vec<f32>> {
    let out = g * rank;
    // EXL3 checkpoints store one linear per output group, `{name}.slice.{g}`.
    if ck.contains(&format!("{name}.slice.0.trellis")) {
        let mut w = Vec::with_capacity(out * inp);
        for gi in 0..g {
            let slice = format!("{name}.slice.{gi}");
            w.extend(
                exl3_dense(ck, &slice, rank, inp)?
                    .ok_or_else(|| Error::Invalid(format!("tensor `{slice}.trellis` not found")))?
                    .w,
            );
        }
        return Ok(w);
    }
    let t = ck.get(&format!("{name}.weight"))?;
    if t.dtype() == DType::F8E4M3 {
        let w = Fp8Weight::load(ck, name)?;
        expect_shape(&format!("{name}.weight"), &t, &[out, inp])?;
        return Ok(w.dequant_bf16().into_iter().map(|v| v.to_f32()).collect());
    }
    expect_shape(&format!("{name}.weight"), &t, &[out, inp])?;
    Ok(Dense::load(ck, &format!("{name}.weight"), out, inp)?.w)
}

impl AttnWeights {
    /// Loads `{prefix}attn.*` for a layer of this role.
    pub fn load(ck: &Checkpoint, prefix: &str, cfg: &Config, role: &LayerRole) -> Result<AttnWeights> {
        let a = format!("{prefix}attn.");
        let (dim, h, d, qr) = (cfg.dim, cfg.n_heads, cfg.head_dim, cfg.q_lora_rank);
        let (g, rank) = (cfg.o_groups, cfg.o_lora_rank);
        let compressor = if role.is_kv_source {
            let wkv = dense(ck, &format!("{a}compressor.wkv"), d, dim)?;
            let wgate = if role.ratio > 1 { Some(dense(ck, &format!("{a}compressor.wgate"), d, dim)?) } else { None };
            Some(Compressor { wkv, wgate, norm: load_bf16_vec(ck, &format!("{a}compressor.norm.weight"), d)? })
        } else {
            None
        };
        let (ih, id) = (cfg.index_n_heads, cfg.index_head_dim);
        let index_keys = if role.is_kv_source && role.is_index_source {
            Some(IndexKeys {
                wk: dense(ck, &format!("{a}indexer.wk"), id, d)?,
                norm: load_bf16_vec(ck, &format!("{a}indexer.k_norm.weight"), id)?,
            })
        } else {
            None
        };
        let indexer = if role.is_index_source {
            Some(Indexer {
                wq_b: fp8(ck, &format!("{a}indexer.wq_b"), ih * id, qr)?,
                weights_proj: Dense::load(ck, &format!("{a}indexer.weights_proj.weight"), ih, dim)?,
                heads: ih,
                head_dim: id,
            })
        } else {
            None
        };
        Ok(AttnWeights {
            n_heads: h,
            head_dim: d,
            window: cfg.window_size,
            ratio: role.ratio,
            o_groups: g,
            o_lora_rank: rank,
            index_topk: cfg.index_topk,
            is_candidate_source: role.is_candidate_source,
            uses_candidates: role.uses_candidates,
            candidate_blocks: cfg.candidate_topk_blocks,
            candidate_block: cfg.candidate_block_size,
            wq_a: fp8(ck, &format!("{a}wq_a"), qr, dim)?,
            q_norm: load_bf16_vec(ck, &format!("{a}q_norm.weight"), qr)?,
            wq_b: fp8(ck, &format!("{a}wq_b"), h * d, qr)?,
            wkv: fp8(ck, &format!("{a}wkv"), d, dim)?,
            kv_norm: load_bf16_vec(ck, &format!("{a}kv_norm.weight"), d)?,
            wo_a: load_wo_a(ck, &format!("{a}wo_a"), (g, rank), h * d / g)?,
            wo_a_lanes8: cfg.wo_a_lanes8,
            wo_b: fp8(ck, &format!("{a}wo_b"), dim, g * rank)?,
            sink: load_vec(ck, &format!("{a}attn_sink"), h)?,
            compressor,
            index_keys,
            indexer,
            split: None,
            sp: None,
        })
    }
}
