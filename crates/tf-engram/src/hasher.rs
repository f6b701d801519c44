//! N-gram hash ids (spec §10.1 step 4): per position and engram layer, one bucket id per (order, head).

use crate::history::{DEAD, DEFAULT_MAX_ROLLBACK, NgramHistory};
use crate::layout::{EngramConfig, EngramLayout};
use crate::multipliers::multipliers_n;
use crate::token_map::TokenMap;
use crate::{EngramError, Result};
use std::sync::Arc;

/// Hash ids of a run of tokens, layer-major so each layer's ids are one slice to gather from its table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NgramIds {
    ids: Vec<u64>,
    n_tokens: usize,
    cols: usize,
}

impl NgramIds {
    pub fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    /// Ids per token per layer (24 for V4.1).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// All ids of engram layer `layer_index`: `n_tokens × cols`, token-major.
    pub fn layer(&self, layer_index: usize) -> &[u64] {
        let n = self.n_tokens * self.cols;
        &self.ids[layer_index * n..(layer_index + 1) * n]
    }

    /// The `cols` ids of one token in one layer: order 2 heads 0.., then order 3, ….
    pub fn at(&self, layer_index: usize, token: usize) -> &[u64] {
        &self.layer(layer_index)[token * self.cols..(token + 1) * self.cols]
    }
}

/// The reference asserts the map's class count, since every multiplier derives from it.
fn check_classes(cfg: &EngramConfig, token_map: &TokenMap) -> Result<u32> {
    let classes = token_map.classes();
    if classes != cfg.compressed_vocab_size {
        let msg = format!("{classes} classes, but engram_compressed_vocab_size is {}", cfg.compressed_vocab_size);
        return Err(EngramError::TokenMap(msg));
    }
    Ok(classes)
}

/// Turns token ids into Engram row ids; stateless itself, it advances a caller-held `NgramHistory`.
#[derive(Clone, Debug)]
pub struct NgramHasher {
    layout: EngramLayout,
    token_map: Arc<TokenMap>,
    pad: i64,
    multipliers: Vec<Vec<i64>>,
    primes: Vec<Vec<i64>>,
}

impl NgramHasher {
    /// A hasher with the reference's multipliers (numpy draws, see `multipliers`) for the config's layers and vocab.
    pub fn new(cfg: &EngramConfig, token_map: Arc<TokenMap>) -> Result<NgramHasher> {
        check_classes(cfg, &token_map)?;
        let n = cfg.max_ngram_size;
        let table = cfg.layer_ids.iter().map(|&layer| multipliers_n(cfg.compressed_vocab_size, layer, n)).collect();
        NgramHasher::with_multipliers(cfg, token_map, table)
    }

    /// A hasher with caller-supplied multipliers, one row (at least `max_ngram_size` long) per engram layer.
    pub fn with_multipliers(
        cfg: &EngramConfig,
        token_map: Arc<TokenMap>,
        multipliers: Vec<Vec<i64>>,
    ) -> Result<NgramHasher> {
        let layout = EngramLayout::new(cfg)?;
        let classes = check_classes(cfg, &token_map)?;
        let pad = i64::from(token_map.compress(cfg.pad_id)?);
        if multipliers.len() != layout.n_layers() {
            let msg = format!("{} multiplier rows for {} engram layers", multipliers.len(), layout.n_layers());
            return Err(EngramError::Config(msg));
        }
        let n = layout.max_ngram_size();
        let mut rows = Vec::with_capacity(multipliers.len());
        for (row, &layer) in multipliers.into_iter().zip(layout.layer_ids()) {
            if row.len() < n {
                return Err(EngramError::Config(format!(
                    "layer {layer}: {} multipliers for n-grams up to {n}",
                    row.len()
                )));
            }
            // positive and bounded so that every class × multiplier product is a non-negative i64
            if let Some(&m) = row[..n].iter().find(|&&m| m <= 0 || m.checked_mul(i64::from(classes)).is_none()) {
                return Err(EngramError::Config(format!(
                    "layer {layer}: multiplier {m} overflows with {classes} classes"
                )));
            }
            rows.push(row[..n].to_vec());
        }
        let primes = (0..layout.n_layers())
            .map(|i| layout.primes(i).iter().map(|&p| i64::try_from(p)).collect::<Result<Vec<i64>, _>>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| EngramError::Config("bucket primes exceed i64".into()))?;
        Ok(NgramHasher { layout, token_map, pad, multipliers: rows, primes })
    }

    pub fn layout(&self) -> &EngramLayout {
        &self.layout
    }

    pub fn token_map(&self) -> &TokenMap {
        &self.token_map
    }

    /// The compressed id that fills missing or blocked history: `token_map[engram_pad_id]`.
    pub fn pad(&self) -> i64 {
        self.pad
    }

    /// The multipliers in use for engram layer `layer_index`.
    pub fn multipliers(&self, layer_index: usize) -> &[i64] {
        &self.multipliers[layer_index]
    }

    /// An empty history for one sequence, able to roll back `DEFAULT_MAX_ROLLBACK` tokens.
    pub fn history(&self) -> NgramHistory {
        self.history_with_rollback(DEFAULT_MAX_ROLLBACK)
    }

    /// An empty history able to roll back `max_rollback` tokens.
    pub fn history_with_rollback(&self, max_rollback: usize) -> NgramHistory {
        NgramHistory::new(self.layout.max_ngram_size() - 1, max_rollback)
    }

    /// Hashes raw token ids; `live[i] == false` marks token i DEAD (an image-span position).
    pub fn hash_tokens(&self, history: &mut NgramHistory, tokens: &[u32], live: Option<&[bool]>) -> Result<NgramIds> {
        if let Some(live) = live
            && live.len() != tokens.len()
        {
            return Err(EngramError::Config(format!("{} live flags for {} tokens", live.len(), tokens.len())));
        }
        let mut compressed = Vec::with_capacity(tokens.len());
        for (i, &t) in tokens.iter().enumerate() {
            let c = i64::from(self.token_map.compress(t)?);
            compressed.push(if live.is_some_and(|l| !l[i]) { DEAD } else { c });
        }
        Ok(self.hash_valid(history, &compressed))
    }

    /// Hashes already-compressed ids, `DEAD` (−1) included; nothing is consumed if any id is invalid.
    pub fn hash_compressed(&self, history: &mut NgramHistory, compressed: &[i64]) -> Result<NgramIds> {
        let classes = self.token_map.classes();
        if let Some(&id) = compressed.iter().find(|&&c| c != DEAD && !(0..i64::from(classes)).contains(&c)) {
            return Err(EngramError::CompressedOutOfRange { id, classes });
        }
        Ok(self.hash_valid(history, compressed))
    }

    fn hash_valid(&self, history: &mut NgramHistory, compressed: &[i64]) -> NgramIds {
        let (n, cols, heads) = (self.layout.max_ngram_size(), self.layout.cols(), self.layout.n_heads());
        let per_layer = compressed.len() * cols;
        let mut ids = vec![0u64; self.layout.n_layers() * per_layer];
        let mut window = vec![self.pad; n];
        for (t, &c) in compressed.iter().enumerate() {
            // the n-gram ending here reaches back until the sequence start or a DEAD token, padding beyond
            let mut blocked = false;
            for (k, slot) in window.iter_mut().enumerate() {
                let source = if k == 0 { Some(c) } else { history.back(k) };
                blocked |= source.is_none_or(|s| s == DEAD);
                *slot = if blocked { self.pad } else { source.unwrap_or(self.pad) };
            }
            history.push(c);
            for (l, m) in self.multipliers.iter().enumerate() {
                let (primes, offsets) = (&self.primes[l], self.layout.offsets(l));
                let out = &mut ids[l * per_layer + t * cols..l * per_layer + (t + 1) * cols];
                let mut rolling = window[0] * m[0];
                for k in 1..n {
                    rolling ^= window[k] * m[k];
                    for h in (k - 1) * heads..k * heads {
                        out[h] = rolling.rem_euclid(primes[h]) as u64 + offsets[h];
                    }
                }
            }
        }
        NgramIds { ids, n_tokens: compressed.len(), cols }
    }
}
