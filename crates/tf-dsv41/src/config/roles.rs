//! Each layer's role, derived from the config once (dsv41 §6.1): attention mode, owners, RoPE table.

use super::Config;

/// CSA2 mode of a layer's attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnMode {
    /// Sliding window only (ratio 0: layers 0–1 and the DSpark stages).
    Swa,
    /// Owns a compressor and an indexer (KV source and index source).
    Full,
    /// Reads another layer's compressed KV and top-k.
    Reuse,
    /// Reads another layer's compressed KV and keys, selects with its own indexer queries.
    Reindex,
}

/// Which RoPE table a layer uses: plain θ for ratio 0, compressed θ with YaRN otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeKind {
    Plain,
    Yarn,
}

/// What one layer does and whose state it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerRole {
    pub layer: usize,
    pub ratio: usize,
    pub mode: AttnMode,
    /// The KV source whose compressed cache (and index keys) this layer reads.
    pub kv_owner: Option<usize>,
    /// The index source whose top-k selection this layer uses.
    pub sel_owner: Option<usize>,
    pub is_kv_source: bool,
    pub is_index_source: bool,
    pub is_candidate_source: bool,
    /// Reindex layers restricted to the candidate source's blocks.
    pub uses_candidates: bool,
    pub rope: RopeKind,
    pub is_dspark: bool,
}

/// Roles of every backbone layer and DSpark stage; assumes a validated config.
pub fn roles(cfg: &Config) -> Vec<LayerRole> {
    (0..cfg.total_layers()).map(|l| role(cfg, l)).collect()
}

fn latest_at_or_below(sources: &[usize], l: usize) -> Option<usize> {
    sources.iter().copied().filter(|&s| s <= l).max()
}

fn role(cfg: &Config, l: usize) -> LayerRole {
    let ratio = cfg.compress_ratios[l];
    let backbone = l < cfg.n_layers;
    let is_kv_source = backbone && cfg.kv_source_layers.contains(&l);
    let is_index_source = backbone && cfg.index_source_layers.contains(&l);
    let compressed = backbone && ratio > 0;
    let kv_owner = if compressed { latest_at_or_below(&cfg.kv_source_layers, l) } else { None };
    let sel_owner = if compressed { latest_at_or_below(&cfg.index_source_layers, l) } else { None };
    let mode = match (compressed, is_kv_source, is_index_source) {
        (false, _, _) => AttnMode::Swa,
        (true, true, _) => AttnMode::Full,
        (true, false, true) => AttnMode::Reindex,
        (true, false, false) => AttnMode::Reuse,
    };
    let cand = cfg.candidate_source_layer;
    LayerRole {
        layer: l,
        ratio,
        mode,
        kv_owner,
        sel_owner,
        is_kv_source,
        is_index_source,
        is_candidate_source: is_index_source && cand == l as i64,
        uses_candidates: is_index_source && cand >= 0 && (cand as usize) < l,
        rope: if ratio > 0 { RopeKind::Yarn } else { RopeKind::Plain },
        is_dspark: !backbone,
    }
}
