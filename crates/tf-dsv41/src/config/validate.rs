//! Config checks, each naming the field it is about.

use super::{Config, ConfigError};

fn err<T>(field: &str, msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::field(field, msg))
}

fn multiple(field: &str, v: usize, of: usize) -> Result<(), ConfigError> {
    if v == 0 || !v.is_multiple_of(of) {
        return err(field, format!("{v} must be a positive multiple of {of} (quantization group)"));
    }
    Ok(())
}

impl Config {
    /// Checks everything the forward relies on; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_dims()?;
        self.validate_layers()?;
        self.validate_moe()?;
        self.validate_engram()?;
        self.validate_dspark()
    }

    fn validate_dims(&self) -> Result<(), ConfigError> {
        multiple("dim", self.dim, 32)?;
        multiple("q_lora_rank", self.q_lora_rank, 32)?;
        multiple("head_dim", self.head_dim, 32)?;
        multiple("index_head_dim", self.index_head_dim, 32)?;
        multiple("moe_inter_dim", self.moe_inter_dim, 32)?;
        if self.rope_head_dim == 0 || !self.rope_head_dim.is_multiple_of(2) || self.rope_head_dim > self.index_head_dim
        {
            return err(
                "rope_head_dim",
                format!("{} must be even, positive and at most index_head_dim", self.rope_head_dim),
            );
        }
        if self.n_heads == 0 || self.o_groups == 0 || !self.n_heads.is_multiple_of(self.o_groups) {
            return err("o_groups", format!("{} must divide n_heads = {}", self.o_groups, self.n_heads));
        }
        multiple("o_lora_rank", self.o_groups * self.o_lora_rank, 32)
            .map_err(|_| ConfigError::field("o_lora_rank", "o_groups·o_lora_rank must be a multiple of 32"))?;
        multiple("n_heads", self.n_heads * self.head_dim / self.o_groups, 32)?;
        if self.window_size == 0 {
            return err("window_size", "must be positive");
        }
        if self.hc_mult == 0 || self.hc_sinkhorn_iters == 0 {
            return err("hc_mult", "hc_mult and hc_sinkhorn_iters must be positive");
        }
        if self.vocab_size == 0 || self.n_layers == 0 {
            return err("n_layers", "vocab_size and n_layers must be positive");
        }
        Ok(())
    }

    fn validate_layers(&self) -> Result<(), ConfigError> {
        let total = self.total_layers();
        if self.compress_ratios.len() != total {
            return err(
                "compress_ratios",
                format!("has {} entries, expected n_layers + n_mtp_layers = {total}", self.compress_ratios.len()),
            );
        }
        for (l, &r) in self.compress_ratios.iter().enumerate() {
            if r > 2 || (l >= self.n_layers && r != 0) {
                return err(
                    "compress_ratios",
                    format!("layer {l} has ratio {r}: backbone ratios are 0, 1 or 2, DSpark stages 0"),
                );
            }
        }
        for (field, list) in
            [("kv_source_layers", &self.kv_source_layers), ("index_source_layers", &self.index_source_layers)]
        {
            for &s in list.iter() {
                if s >= self.n_layers || self.compress_ratios[s] == 0 {
                    return err(field, format!("layer {s} is not a compressed backbone layer"));
                }
            }
        }
        for l in 0..self.n_layers {
            let r = self.compress_ratios[l];
            if r == 0 {
                continue;
            }
            let owner = |list: &Vec<usize>| list.iter().copied().filter(|&s| s <= l).max();
            match owner(&self.kv_source_layers) {
                Some(o) if self.compress_ratios[o] == r => {}
                Some(o) => {
                    return err(
                        "kv_source_layers",
                        format!("layer {l} (ratio {r}) would read KV source {o} of ratio {}", self.compress_ratios[o]),
                    );
                }
                None => {
                    return err(
                        "kv_source_layers",
                        format!("layer {l} has ratio {r} but no KV source at or before it"),
                    );
                }
            }
            match owner(&self.index_source_layers) {
                Some(o) if self.compress_ratios[o] == r => {}
                Some(o) => {
                    return err(
                        "index_source_layers",
                        format!(
                            "layer {l} (ratio {r}) would reuse index source {o} of ratio {}",
                            self.compress_ratios[o]
                        ),
                    );
                }
                None => {
                    return err(
                        "index_source_layers",
                        format!("layer {l} has ratio {r} but no index source at or before it"),
                    );
                }
            }
        }
        let c = self.candidate_source_layer;
        if c >= 0 {
            let c = c as usize;
            if !self.index_source_layers.contains(&c) {
                return err("candidate_source_layer", format!("{c} is not an index source"));
            }
            if self.candidate_block_size == 0 || self.candidate_topk_blocks == 0 {
                return err("candidate_block_size", "candidate pre-filter needs positive block size and topk blocks");
            }
        }
        if self.index_topk == 0 || self.index_n_heads == 0 {
            return err("index_topk", "index_topk and index_n_heads must be positive");
        }
        Ok(())
    }

    fn validate_moe(&self) -> Result<(), ConfigError> {
        if self.score_func != "sqrtsoftplus" {
            return err(
                "score_func",
                format!("`{}` is not used by V4.1; only sqrtsoftplus is supported", self.score_func),
            );
        }
        if self.n_shared_experts != 1 {
            return err("n_shared_experts", format!("must be 1, found {}", self.n_shared_experts));
        }
        for l in [0, self.n_layers] {
            let (n, k) = self.moe_config(l);
            if k == 0 || k > n {
                return err("n_activated_experts", format!("{k} active of {n} routed experts (layer {l})"));
            }
        }
        if self.dtype != "fp8" || self.expert_dtype.as_deref() != Some("fp4") {
            return err("dtype", "V4.1 checkpoints are dtype fp8 with expert_dtype fp4");
        }
        Ok(())
    }

    fn validate_engram(&self) -> Result<(), ConfigError> {
        if self.engram_layer_ids.is_empty() {
            return Ok(());
        }
        if self.engram_num_embeddings.len() != self.engram_layer_ids.len() {
            return err("engram_num_embeddings", "needs one entry per engram layer");
        }
        if let Some(&l) = self.engram_layer_ids.iter().find(|&&l| l >= self.n_layers) {
            return err("engram_layer_ids", format!("layer {l} is not a backbone layer"));
        }
        if self.engram_max_ngram_size < 2 || self.engram_n_heads == 0 || self.engram_compressed_vocab_size == 0 {
            return err("engram_max_ngram_size", "engram needs n-gram size ≥ 2, heads and a compressed vocab");
        }
        multiple("engram_head_dim", self.engram_head_dim, 32)
    }

    fn validate_dspark(&self) -> Result<(), ConfigError> {
        if self.n_mtp_layers == 0 || self.dspark_block_size == 0 {
            return Ok(());
        }
        if self.dspark_target_layer_ids.is_empty() {
            return err("dspark_target_layer_ids", "DSpark needs target layers");
        }
        if let Some(&l) = self.dspark_target_layer_ids.iter().find(|&&l| l >= self.n_layers) {
            return err("dspark_target_layer_ids", format!("layer {l} is not a backbone layer"));
        }
        if self.dspark_noise_token_id as usize >= self.vocab_size {
            return err("dspark_noise_token_id", "must be a token id");
        }
        Ok(())
    }
}
