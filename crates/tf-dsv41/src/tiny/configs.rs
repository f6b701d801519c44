//! The two synthetic configs as HF `config.json` values: `tiny` (spec §18, text-only) and `small` (real vocab).

use crate::config::Config;
use serde_json::{Value, json};

/// Which synthetic model to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TinyKind {
    /// Spec §18: vocab 512, dim 256, a synthetic word-level tokenizer.
    Tiny,
    /// The §18 layer map at dim 128 with the DeepSeek-V4 tokenizer (vocab 129,280) and its Engram token map.
    Small,
}

/// A synthetic config name other than `tiny` or `small`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown synthetic config `{0}` (expected tiny or small)")]
pub struct UnknownTinyKind(pub String);

impl std::str::FromStr for TinyKind {
    type Err = UnknownTinyKind;
    fn from_str(s: &str) -> Result<TinyKind, UnknownTinyKind> {
        match s {
            "tiny" => Ok(TinyKind::Tiny),
            "small" => Ok(TinyKind::Small),
            other => Err(UnknownTinyKind(other.into())),
        }
    }
}

impl TinyKind {
    pub fn name(self) -> &'static str {
        match self {
            TinyKind::Tiny => "tiny",
            TinyKind::Small => "small",
        }
    }

    /// Shards written: at least two, so sharded loading is always exercised.
    pub fn shards(self) -> usize {
        match self {
            TinyKind::Tiny => 2,
            TinyKind::Small => 3,
        }
    }

    /// The HF-style `config.json` (no `vision_config`: the synthetic models are text-only).
    pub fn hf_json(self) -> Value {
        let mut v = tiny_hf();
        if self == TinyKind::Small {
            let rows = engram_rows(1000, 2, 4, 2);
            let t = &mut v["text_config"];
            t["vocab_size"] = json!(129_280);
            t["hidden_size"] = json!(128);
            t["max_position_embeddings"] = json!(4096);
            t["engram_vocab_size"] = json!(1000);
            t["engram_num_embeddings"] = json!(rows);
            t["engram_compressed_vocab_size"] = json!(99_092);
            t["dspark_noise_token_id"] = json!(128_799);
            v["image_token_id"] = json!(129_264);
        }
        v
    }

    /// The parsed config, in reference names.
    pub fn config(self) -> Config {
        Config::from_hf_json(&self.hf_json().to_string()).expect("synthetic configs are valid")
    }
}

/// Spec §18 tiny config.
pub fn tiny_config() -> Config {
    TinyKind::Tiny.config()
}

/// The `small` config: tiny's structure at dim 128 with the real vocab.
pub fn small_config() -> Config {
    TinyKind::Small.config()
}

/// Engram table rows per layer: the sum of that layer's bucket primes (spec §10.1 step 3).
pub fn engram_rows(engram_vocab_size: u64, n_layers: usize, max_ngram: usize, n_heads: usize) -> Vec<u64> {
    let per_layer = (max_ngram - 1) * n_heads;
    let primes = tf_engram::primes::bucket_primes(engram_vocab_size, per_layer * n_layers).expect("primes fit in u64");
    primes.chunks(per_layer).map(|c| c.iter().sum()).collect()
}

/// Spec §18's JSON with `vision_config` left out.
const TINY_HF: &str = r#"{
  "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "dtype": "bfloat16",
  "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "image_token_id": 500,
  "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32],
                          "scale_fmt": "ue8m0", "expert_dtype": "fp4"},
  "text_config": {
    "model_type": "deepseek_v41_text", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 8,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 32,
    "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64, "sliding_window": 16,
    "compress_ratios": [0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0],
    "kv_source_layer_ids": [2, 4], "index_source_layer_ids": [2, 4, 6],
    "candidate_source_layer_id": 4, "candidate_topk_blocks": 3, "candidate_block_size": 4,
    "index_n_heads": 4, "index_head_dim": 64, "index_topk": 8,
    "rope_theta": 10000, "compress_rope_theta": 160000,
    "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 32, "beta_fast": 32, "beta_slow": 1},
    "max_position_embeddings": 256,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "moe_intermediate_size": 128,
    "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": true, "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0, "hidden_act": "silu", "rms_norm_eps": 1e-20,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "num_hash_layers": 0,
    "engram_layer_ids": [1, 2], "engram_num_embeddings": [630, 834], "engram_max_ngram_size": 4,
    "engram_vocab_size": 97, "engram_n_heads": 2, "engram_head_dim": 32, "engram_pad_token_id": 2,
    "engram_compressed_vocab_size": 256,
    "num_nextn_predict_layers": 3, "dspark_block_size": 5, "dspark_noise_token_id": 511,
    "dspark_target_layer_ids": [5, 6, 7], "dspark_markov_rank": 32,
    "dspark_n_routed_experts": 4, "dspark_num_experts_per_tok": 2
  }
}"#;

fn tiny_hf() -> Value {
    serde_json::from_str(TINY_HF).expect("the tiny config text is JSON")
}
