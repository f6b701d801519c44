//! What one forward step reads and computes on the flash-shaped layers: the floors the bench divides by.

use std::collections::BTreeSet;
use tf_dsv41::config::{Config, roles};
use tf_dsv41::cuda::GpuModel;

/// Bytes a decode call of `rows` rows at context `ctx` reads: weights actually touched (the routed experts the ids name) and KV.
pub struct StepBytes {
    pub weights: usize,
    pub kv: usize,
    pub distinct_experts: Vec<usize>,
}

/// Counts from the route log of one call (one id list per layer, `rows × topk` each).
pub fn step_bytes(model: &GpuModel, routes: &[Vec<i32>], rows: usize, ctx: usize) -> StepBytes {
    let cfg = model.cfg();
    let mut weights = cfg.vocab_size * cfg.dim * 2 + rows * cfg.dim * 2 + cfg.dim * 2;
    let mut distinct_experts = Vec::new();
    for (layer, ids) in routes.iter().enumerate().take(cfg.n_layers) {
        let (rest, expert) = model.block_weight_bytes(layer);
        let distinct = ids.iter().collect::<BTreeSet<_>>().len();
        distinct_experts.push(distinct);
        weights += rest + distinct * expert;
    }
    StepBytes { weights, kv: kv_bytes(cfg, ctx), distinct_experts }
}

/// KV a decode row reads at context `ctx`: its window ring, the selected compressed rows, and the index keys it scores.
pub fn kv_bytes(cfg: &Config, ctx: usize) -> usize {
    let mut total = 0;
    for role in roles(cfg).iter().take(cfg.n_layers) {
        total += ctx.min(cfg.window_size) * cfg.head_dim * 2;
        if let Some(compressed) = ctx.checked_div(role.ratio) {
            total += compressed.min(cfg.index_topk) * cfg.head_dim * 2;
            if role.is_index_source {
                total += compressed * cfg.index_head_dim * 2;
            }
        }
    }
    total
}

/// Model FLOPs of one prompt row at position `pos`: 2 per multiply-add of every linear it runs and of its attention.
pub fn row_flops(cfg: &Config, pos: usize) -> f64 {
    let (dim, h, d, qr) = (cfg.dim, cfg.n_heads, cfg.head_dim, cfg.q_lora_rank);
    let (g, rank, inter) = (cfg.o_groups, cfg.o_lora_rank, cfg.moe_inter_dim);
    let (ih, id, hc) = (cfg.index_n_heads, cfg.index_head_dim, cfg.hc_mult);
    let mut macs = 0usize;
    for role in roles(cfg).iter().take(cfg.n_layers) {
        macs += qr * dim + h * d * qr + d * dim + g * rank * (h * d / g) + dim * g * rank;
        macs += cfg.n_routed_experts * dim + cfg.n_activated_experts * 3 * dim * inter;
        macs += 3 * dim * inter * cfg.n_shared_experts + 2 * (2 + hc) * hc * hc * dim;
        let keys = (pos + 1).min(cfg.window_size);
        let mut attended = keys;
        if role.is_kv_source {
            macs += d * dim * if role.ratio > 1 { 2 } else { 1 };
            if role.is_index_source {
                macs += id * d / role.ratio.max(1);
            }
        }
        if let Some(compressed) = (pos + 1).checked_div(role.ratio) {
            attended += compressed.min(cfg.index_topk);
            if role.is_index_source {
                macs += ih * id * qr + ih * dim + ih * id * compressed;
            }
        }
        macs += 2 * h * d * attended;
    }
    2.0 * macs as f64
}
