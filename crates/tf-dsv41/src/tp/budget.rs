//! Per-rank memory of a dsv41 config under a TP split (`tf plan`): weights, KV per token, workspace, and the longest context that fits.

use super::{ExpertSplit, Part, head_ranges, part, part_bytes};
use crate::Config;
use crate::config::roles;
use crate::inventory::{Param, Store, params};

/// How the FP8/FP4 linears are stored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WeightFormat {
    /// The official checkpoint: FP8 32×32 tiles, FP4 experts with E8M0 scales.
    Official,
    /// An EXL3 quant at this many bits per weight for every FP8/FP4 linear (head and embedding stay bf16).
    Exl3 { bpw: f64 },
}

/// The machine and serving settings a budget is made for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Memory of one GPU, bytes.
    pub gpu_bytes: u64,
    /// Rows of a prefill chunk (`--prefill-chunk`): the workspace scales with it.
    pub prefill_chunk: usize,
    /// Engram rows kept decoded in host memory per table (`--engram-cache-rows`).
    pub engram_cache_rows: usize,
    /// Left for the CUDA context, the allocator's slack and the kernels' modules.
    pub reserve_bytes: u64,
}

/// What each rank needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub world: usize,
    pub heads: Vec<usize>,
    /// GPU bytes of weights per rank (the Engram tables excluded: they stay on disk).
    pub weights: Vec<u64>,
    /// Engram table bytes per rank (rows split), read from disk.
    pub engram_tables: Vec<u64>,
    /// Host bytes of the Engram hot-row cache per rank.
    pub engram_cache: u64,
    /// GPU bytes per context token of one lane (the compressed KV and index keys are whole on every rank).
    pub kv_per_token: f64,
    /// GPU bytes per lane whatever its length (window rings, open compressor groups).
    pub kv_fixed: u64,
    /// GPU bytes of a prefill chunk's buffers, and their growth per context token (the indexer's scores).
    pub workspace_fixed: u64,
    pub workspace_per_token: f64,
    /// The longest context of one lane that fits each rank (0: the weights alone do not fit).
    pub max_context: Vec<u64>,
}

fn elements(p: &Param) -> usize {
    match &p.store {
        &Store::Fp8Tiles { rows, cols } | &Store::Fp8Rows { rows, cols } | &Store::Fp4 { rows, cols } => rows * cols,
        Store::Bf16(s) | Store::F32(s) => s.iter().product(),
    }
}

fn stored_bytes(p: &Param, pt: &Part, format: WeightFormat) -> u64 {
    match (format, &p.store) {
        (WeightFormat::Exl3 { bpw }, Store::Fp8Tiles { .. } | Store::Fp4 { .. }) => {
            let share = part_bytes(p, pt) as f64 / p.nbytes() as f64;
            (elements(p) as f64 * share * bpw / 8.0).ceil() as u64
        }
        _ => part_bytes(p, pt) as u64,
    }
}

/// The per-rank budget of `cfg` split over `world` ranks.
pub fn budget(cfg: &Config, world: usize, experts: ExpertSplit, format: WeightFormat, lim: Limits) -> Budget {
    let (mut weights, mut engram_tables) = (vec![0u64; world], vec![0u64; world]);
    for p in params(cfg) {
        for (rank, (w, e)) in weights.iter_mut().zip(&mut engram_tables).enumerate() {
            let pt = part(cfg, world, rank, experts, &p);
            if p.name.ends_with("engram.embed.weight") {
                *e += part_bytes(&p, &pt) as u64;
            } else {
                *w += stored_bytes(&p, &pt, format);
            }
        }
    }
    let all = roles(cfg);
    let (hd, ihd) = (cfg.head_dim as f64, cfg.index_head_dim as f64);
    let mut kv_per_token = 0.0;
    let mut kv_fixed = (all.len() * cfg.window_size * cfg.head_dim * 2) as u64;
    let mut min_ratio = usize::MAX;
    for r in all.iter().take(cfg.n_layers) {
        if r.is_kv_source {
            let keys = if r.is_index_source { ihd * 2.0 } else { 0.0 };
            kv_per_token += (hd * 2.0 + keys) / r.ratio as f64;
            kv_fixed += (r.ratio * cfg.head_dim * 4 * 2) as u64;
        }
        if r.is_index_source && r.ratio > 0 {
            min_ratio = min_ratio.min(r.ratio);
        }
    }
    let heads: Vec<usize> = match experts {
        ExpertSplit::ExpertsOnly => vec![cfg.n_heads; world],
        _ => head_ranges(cfg, world).iter().map(|h| h.len()).collect(),
    };
    let max_heads = heads.iter().copied().max().unwrap_or(0);
    let (c, hc, dim) = (lim.prefill_chunk, cfg.hc_mult, cfg.dim);
    let (_, topk) = cfg.moe_config(0);
    let inter = cfg.moe_inter_dim.div_ceil(world);
    // Six live stream buffers, q and attention output of this rank's heads, routed and shared expert activations, f32 logits of one row.
    let workspace_fixed = (c * hc * dim * 2 * 6
        + c * max_heads * cfg.head_dim * 2 * 2
        + c * (topk + 1) * inter * 2 * 3
        + cfg.vocab_size * 4) as u64;
    // Index scores (f32) and the selection mask (u8) of every chunk row against every compressed group.
    let workspace_per_token = if min_ratio == usize::MAX { 0.0 } else { (c * 5) as f64 / min_ratio as f64 };
    let per_token = kv_per_token + workspace_per_token;
    let max_context = weights
        .iter()
        .map(|&w| {
            let used = w + kv_fixed + workspace_fixed + lim.reserve_bytes;
            lim.gpu_bytes.checked_sub(used).map_or(0, |free| (free as f64 / per_token).floor() as u64)
        })
        .collect();
    let tables = cfg.engram_layer_ids.len() as u64;
    Budget {
        world,
        heads,
        weights,
        engram_tables,
        engram_cache: lim.engram_cache_rows as u64 * 2 * cfg.engram_head_dim as u64 * tables,
        kv_per_token,
        kv_fixed,
        workspace_fixed,
        workspace_per_token,
        max_context,
    }
}
