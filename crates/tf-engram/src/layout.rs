//! Engram config values and the bucket layout they imply: per layer, one prime-sized range per (n-gram order, head).

use crate::primes::bucket_primes;
use crate::{EngramError, Result};

/// The config fields Engram hashing reads (names follow DeepSeek's `config.json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngramConfig {
    /// `engram_layer_ids`: backbone layers that carry an Engram, in table order.
    pub layer_ids: Vec<usize>,
    /// `engram_num_embeddings`: table rows per layer, checked against the primes; empty skips the check.
    pub num_embeddings: Vec<u64>,
    /// `engram_max_ngram_size`: orders 2..=max are hashed.
    pub max_ngram_size: usize,
    /// `engram_vocab_size`: primes are searched from `engram_vocab_size − 1` upward.
    pub vocab_size: u64,
    /// `engram_n_heads`: hash heads per n-gram order.
    pub n_heads: usize,
    /// `engram_pad_id` (HF: `engram_pad_token_id`): the raw token whose class fills missing history.
    pub pad_id: u32,
    /// `engram_compressed_vocab_size`: classes of the token map; the multipliers depend on it.
    pub compressed_vocab_size: u32,
}

impl EngramConfig {
    /// DeepSeek-V4.1-Flash as released.
    pub fn deepseek_v41_flash() -> EngramConfig {
        EngramConfig {
            layer_ids: vec![1, 14],
            num_embeddings: vec![384_006_168, 384_016_682],
            max_ngram_size: 4,
            vocab_size: 16_000_000,
            n_heads: 8,
            pad_id: 2,
            compressed_vocab_size: 99_092,
        }
    }
}

/// Primes and offsets of every engram layer; ids of layer `i` lie in `0..rows(i)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngramLayout {
    layer_ids: Vec<usize>,
    max_ngram_size: usize,
    n_heads: usize,
    primes: Vec<Vec<u64>>,
    offsets: Vec<Vec<u64>>,
}

fn config_err(msg: impl Into<String>) -> EngramError {
    EngramError::Config(msg.into())
}

impl EngramLayout {
    /// Draws the primes layer by layer, order-major and head-minor, and checks `num_embeddings` when given.
    pub fn new(cfg: &EngramConfig) -> Result<EngramLayout> {
        if cfg.layer_ids.is_empty() {
            return Err(config_err("engram_layer_ids is empty"));
        }
        if let Some(i) = (1..cfg.layer_ids.len()).find(|&i| cfg.layer_ids[..i].contains(&cfg.layer_ids[i])) {
            return Err(config_err(format!("engram layer {} is listed twice", cfg.layer_ids[i])));
        }
        if cfg.max_ngram_size < 2 || cfg.n_heads == 0 || cfg.vocab_size == 0 {
            let msg = format!(
                "need engram_max_ngram_size >= 2, engram_n_heads >= 1 and engram_vocab_size >= 1, got {}, {}, {}",
                cfg.max_ngram_size, cfg.n_heads, cfg.vocab_size
            );
            return Err(config_err(msg));
        }
        let cols = (cfg.max_ngram_size - 1) * cfg.n_heads;
        let all = bucket_primes(cfg.vocab_size, cols * cfg.layer_ids.len())
            .ok_or_else(|| config_err("bucket primes overflow u64"))?;
        let primes: Vec<Vec<u64>> = all.chunks(cols).map(<[u64]>::to_vec).collect();
        let offsets = primes
            .iter()
            .map(|p| p.iter().scan(0u64, |acc, &x| Some(std::mem::replace(acc, *acc + x))).collect())
            .collect();
        let layout = EngramLayout {
            layer_ids: cfg.layer_ids.clone(),
            max_ngram_size: cfg.max_ngram_size,
            n_heads: cfg.n_heads,
            primes,
            offsets,
        };
        if !cfg.num_embeddings.is_empty() {
            if cfg.num_embeddings.len() != cfg.layer_ids.len() {
                let msg = format!("{} num_embeddings for {} layers", cfg.num_embeddings.len(), cfg.layer_ids.len());
                return Err(config_err(msg));
            }
            for (i, &want) in cfg.num_embeddings.iter().enumerate() {
                layout.check_rows(i, want)?;
            }
        }
        Ok(layout)
    }

    pub fn layer_ids(&self) -> &[usize] {
        &self.layer_ids
    }

    pub fn n_layers(&self) -> usize {
        self.layer_ids.len()
    }

    /// Position of a backbone layer among the engram layers.
    pub fn layer_index(&self, layer_id: usize) -> Option<usize> {
        self.layer_ids.iter().position(|&l| l == layer_id)
    }

    pub fn max_ngram_size(&self) -> usize {
        self.max_ngram_size
    }

    pub fn n_heads(&self) -> usize {
        self.n_heads
    }

    /// Ids per position per layer: `(max_ngram_size − 1) · n_heads` (24 for V4.1).
    pub fn cols(&self) -> usize {
        (self.max_ngram_size - 1) * self.n_heads
    }

    /// The layer's primes, order-major (2-grams first), head-minor.
    pub fn primes(&self, layer_index: usize) -> &[u64] {
        &self.primes[layer_index]
    }

    /// Exclusive prefix sums of `primes(layer_index)`: where each (order, head) range starts.
    pub fn offsets(&self, layer_index: usize) -> &[u64] {
        &self.offsets[layer_index]
    }

    /// Table rows the layer needs: the sum of its primes.
    pub fn rows(&self, layer_index: usize) -> u64 {
        self.primes[layer_index].iter().sum()
    }

    /// Errors unless a table for this layer has exactly the rows the hash can address.
    pub fn check_rows(&self, layer_index: usize, rows: u64) -> Result<()> {
        let need = self.rows(layer_index);
        if rows != need {
            let layer = self.layer_ids[layer_index];
            return Err(config_err(format!("layer {layer}: table has {rows} rows, the bucket primes sum to {need}")));
        }
        Ok(())
    }
}
