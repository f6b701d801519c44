//! Tensor-parallel split rules for dsv41 (issue 25), written once for any world size: which rows or columns of each parameter a rank holds.

mod budget;
mod ep;
mod local;
pub mod lockstep;
mod rows;
mod table;

pub use budget::{Budget, Limits, WeightFormat, budget};
pub use ep::{SharedComm, gather_cols, gather_experts, gather_owned};
pub use local::{Follower, load_rank, same_everywhere, spawn, spawn_with};
pub use rows::{RowShare, Wire, by_rows, by_rows_pair, by_rows_sized};
pub use table::TableSplit;

use crate::Config;
use crate::inventory::{Param, Store};
use std::ops::Range;

/// FP4 and FP8 scales cover 32 values: width splits cut at multiples of 32 so every rank's scales are its own.
pub const SCALE_BLOCK: usize = 32;

/// How routed experts spread over ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExpertSplit {
    /// Every expert on every rank, its intermediate width split (the thread's TP2/TP4 layout).
    #[default]
    Width,
    /// Whole experts per rank (expert parallel).
    Whole,
    /// `tf serve --tp --tp-split experts`: the backbone's routed experts whole per rank, every other parameter whole on every rank.
    ExpertsOnly,
    /// What `tf serve --tp` runs by default: `ExpertsOnly` plus the backbone's attention heads, `wo_a` groups and `wo_b` rows, the embedding, head and Markov head by vocabulary, and Engram rows.
    ExpertsAndHeads,
}

/// The part of one parameter a rank holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// The whole tensor (replicated on every rank).
    Whole,
    /// Rows `r` of dimension 0.
    Rows(Range<usize>),
    /// Columns `c` of dimension 1.
    Cols(Range<usize>),
    /// Nothing (an expert held by another rank).
    None,
}

/// `units` split over `world` ranks as evenly as possible, the remainder to the last ranks (world 3 of 8 groups: 2, 3, 3).
pub fn partition(units: usize, world: usize) -> Vec<Range<usize>> {
    let (base, extra) = (units / world, units % world);
    let mut at = 0;
    (0..world)
        .map(|r| {
            let n = base + usize::from(r >= world - extra);
            at += n;
            at - n..at
        })
        .collect()
}

fn scaled(r: &Range<usize>, k: usize) -> Range<usize> {
    r.start * k..r.end * k
}

/// Attention heads per rank, in whole `wo_a` groups (uneven splits allowed).
pub fn head_ranges(cfg: &Config, world: usize) -> Vec<Range<usize>> {
    let per_group = cfg.n_heads / cfg.o_groups;
    partition(cfg.o_groups, world).iter().map(|g| scaled(g, per_group)).collect()
}

/// `wo_b` output rows per rank, in whole 32-row scale tiles (the last part ends at `n`).
pub fn out_rows(n: usize, world: usize) -> Vec<Range<usize>> {
    partition(n.div_ceil(SCALE_BLOCK), world)
        .into_iter()
        .map(|p| (p.start * SCALE_BLOCK).min(n)..(p.end * SCALE_BLOCK).min(n))
        .collect()
}

/// The part of `p` that rank `rank` of `world` holds.
pub fn part(cfg: &Config, world: usize, rank: usize, experts: ExpertSplit, p: &Param) -> Part {
    let name = p.name.as_str();
    let tables = ["embed.weight", "head.weight"].contains(&name)
        || name.ends_with(".markov_head.head.weight")
        || name.ends_with(".engram.embed.weight");
    if experts == ExpertSplit::ExpertsAndHeads && tables {
        return part(cfg, world, rank, ExpertSplit::Whole, p);
    }
    if experts == ExpertSplit::ExpertsAndHeads && name.starts_with("layers.") && name.contains(".attn.") {
        let split = part(cfg, world, rank, ExpertSplit::Whole, p);
        return if name.contains(".attn.w") || name.ends_with(".attn.attn_sink") { split } else { Part::Whole };
    }
    if matches!(experts, ExpertSplit::ExpertsOnly | ExpertSplit::ExpertsAndHeads) {
        let (n_experts, _) = cfg.moe_config(layer_of(cfg, name));
        let id =
            name.split(".ffn.experts.").nth(1).and_then(|t| t.split('.').next()).and_then(|s| s.parse::<usize>().ok());
        return match id {
            Some(id) if name.starts_with("layers.") && !partition(n_experts, world)[rank].contains(&id) => Part::None,
            _ => Part::Whole,
        };
    }
    let inner = match name.split('.').next() {
        Some("layers" | "mtp") => name.splitn(3, '.').nth(2).unwrap_or(name),
        _ => name,
    };
    let groups = &partition(cfg.o_groups, world)[rank];
    let heads = &head_ranges(cfg, world)[rank];
    let width = || scaled(&partition(cfg.moe_inter_dim / SCALE_BLOCK, world)[rank], SCALE_BLOCK);
    let rows = |n: usize| Part::Rows(partition(n, world)[rank].clone());
    match inner {
        "attn.wq_b.weight" => Part::Rows(scaled(heads, cfg.head_dim)),
        "attn.attn_sink" => Part::Rows(heads.clone()),
        "attn.wo_a.weight" => Part::Rows(scaled(groups, cfg.o_lora_rank)),
        "attn.wo_b.weight" => Part::Rows(out_rows(cfg.dim, world)[rank].clone()),
        "ffn.shared_experts.w1.weight" | "ffn.shared_experts.w3.weight" => Part::Rows(width()),
        "ffn.shared_experts.w2.weight" => Part::Cols(width()),
        "embed.weight" | "head.weight" | "markov_head.embed.weight" | "markov_head.head.weight" => rows(cfg.vocab_size),
        "engram.embed.weight" => match p.store {
            Store::Fp8Rows { rows: n, .. } => rows(n),
            _ => Part::Whole,
        },
        e if e.starts_with("ffn.experts.") => {
            let (n_experts, _) = cfg.moe_config(layer_of(cfg, name));
            let id: usize = e["ffn.experts.".len()..].split('.').next().and_then(|s| s.parse().ok()).unwrap_or(0);
            match experts {
                ExpertSplit::Whole if partition(n_experts, world)[rank].contains(&id) => Part::Whole,
                ExpertSplit::Whole => Part::None,
                ExpertSplit::Width if e.ends_with(".w2.weight") => Part::Cols(width()),
                ExpertSplit::Width => Part::Rows(width()),
                ExpertSplit::ExpertsOnly | ExpertSplit::ExpertsAndHeads => unreachable!("returned above"),
            }
        }
        _ => Part::Whole,
    }
}

/// The model layer of a `layers.L.` or `mtp.K.` parameter (DSpark stages follow the backbone).
fn layer_of(cfg: &Config, name: &str) -> usize {
    let mut it = name.split('.');
    let (kind, n) = (it.next(), it.next().and_then(|s| s.parse::<usize>().ok()).unwrap_or(0));
    if kind == Some("mtp") { cfg.n_layers + n } else { n }
}

/// Bytes of `p` (weight and scale) that a rank holding `part` stores.
pub fn part_bytes(p: &Param, part: &Part) -> usize {
    let cut = |rows: Option<usize>, cols: Option<usize>| {
        let store = match &p.store {
            &Store::Fp8Tiles { rows: r, cols: c } => {
                Store::Fp8Tiles { rows: rows.unwrap_or(r), cols: cols.unwrap_or(c) }
            }
            &Store::Fp8Rows { rows: r, cols: c } => Store::Fp8Rows { rows: rows.unwrap_or(r), cols: cols.unwrap_or(c) },
            &Store::Fp4 { rows: r, cols: c } => Store::Fp4 { rows: rows.unwrap_or(r), cols: cols.unwrap_or(c) },
            Store::Bf16(s) => Store::Bf16(reshape(s, rows, cols)),
            Store::F32(s) => Store::F32(reshape(s, rows, cols)),
        };
        Param { name: p.name.clone(), store }.nbytes()
    };
    match part {
        Part::Whole => p.nbytes(),
        Part::None => 0,
        Part::Rows(r) => cut(Some(r.len()), None),
        Part::Cols(c) => cut(None, Some(c.len())),
    }
}

fn reshape(s: &[usize], rows: Option<usize>, cols: Option<usize>) -> Vec<usize> {
    let mut s = s.to_vec();
    if let (Some(r), Some(first)) = (rows, s.first_mut()) {
        *first = r;
    }
    if let (Some(c), Some(second)) = (cols, s.get_mut(1)) {
        *second = c;
    }
    s
}
