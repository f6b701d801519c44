//! Model arguments under DeepSeek's reference names (`inference/config.json`), with its defaults.

use serde::{Deserialize, Serialize};

/// Every field of DeepSeek's `ModelArgs` that shapes the model; names are the JSON keys.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub max_batch_size: usize,
    pub max_seq_len: usize,
    pub temperature: f32,
    pub dtype: String,
    pub expert_dtype: Option<String>,
    pub vocab_size: usize,
    pub dim: usize,
    pub moe_inter_dim: usize,
    pub n_layers: usize,
    pub n_mtp_layers: usize,
    pub n_heads: usize,
    pub n_routed_experts: usize,
    pub n_shared_experts: usize,
    pub n_activated_experts: usize,
    pub score_func: String,
    pub gate_temp: f32,
    pub norm_topk_prob: bool,
    pub route_scale: f32,
    pub swiglu_limit: f32,
    pub q_lora_rank: usize,
    pub head_dim: usize,
    pub rope_head_dim: usize,
    pub norm_eps: f32,
    pub o_groups: usize,
    pub o_lora_rank: usize,
    pub window_size: usize,
    pub compress_ratios: Vec<usize>,
    pub kv_source_layers: Vec<usize>,
    pub index_source_layers: Vec<usize>,
    pub compress_rope_theta: f32,
    pub original_seq_len: usize,
    pub rope_theta: f32,
    pub rope_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    pub index_n_heads: usize,
    pub index_head_dim: usize,
    pub index_topk: usize,
    pub candidate_source_layer: i64,
    pub candidate_topk_blocks: usize,
    pub candidate_block_size: usize,
    pub hc_mult: usize,
    pub hc_sinkhorn_iters: usize,
    pub hc_eps: f32,
    pub engram_layer_ids: Vec<usize>,
    pub engram_num_embeddings: Vec<u64>,
    pub engram_max_ngram_size: usize,
    pub engram_vocab_size: u64,
    pub engram_n_heads: usize,
    pub engram_head_dim: usize,
    pub engram_pad_id: u32,
    pub engram_compressed_vocab_size: u64,
    pub vision_n_layers: usize,
    pub vision_dim: usize,
    pub vision_n_heads: usize,
    pub vision_inter_dim: usize,
    pub vision_patch_size: usize,
    pub vision_rope_theta: f32,
    pub vision_downsample_ratio: usize,
    pub vision_max_n_token: usize,
    pub vision_min_pixels: usize,
    pub vision_max_wh_ratio: Option<f32>,
    pub image_token_id: u32,
    pub dspark_block_size: usize,
    pub dspark_noise_token_id: u32,
    pub dspark_target_layer_ids: Vec<usize>,
    pub dspark_markov_rank: usize,
    pub dspark_n_routed_experts: usize,
    pub dspark_n_activated_experts: usize,
    pub bos_token_id: u32,
    pub eos_token_id: u32,
    /// Not from config.json: the sum order of RMSNorm and mHC's x², `Lanes32` unless `Options::sequential_sums`.
    #[serde(skip)]
    pub sums: tf_core::ops::SumOrder,
    /// Not from config.json: grouped `wo_a` in `matmul_nt`'s 8-lane order (the default) or in index order (`Options::sequential_wo_a`).
    #[serde(skip)]
    pub wo_a_lanes8: bool,
}

impl Default for Config {
    /// DeepSeek's `ModelArgs` defaults (a small model, not the released shapes).
    fn default() -> Config {
        Config {
            max_batch_size: 4,
            max_seq_len: 4096,
            temperature: 1.0,
            dtype: "fp8".into(),
            expert_dtype: Some("fp4".into()),
            vocab_size: 129280,
            dim: 1024,
            moe_inter_dim: 1024,
            n_layers: 5,
            n_mtp_layers: 1,
            n_heads: 16,
            n_routed_experts: 8,
            n_shared_experts: 1,
            n_activated_experts: 2,
            score_func: "sqrtsoftplus".into(),
            gate_temp: 1.0,
            norm_topk_prob: true,
            route_scale: 1.0,
            swiglu_limit: 0.0,
            q_lora_rank: 256,
            head_dim: 128,
            rope_head_dim: 32,
            norm_eps: 1e-20,
            o_groups: 8,
            o_lora_rank: 256,
            window_size: 128,
            compress_ratios: vec![0, 2, 2, 1, 1, 0],
            kv_source_layers: vec![1, 3],
            index_source_layers: vec![1, 3],
            compress_rope_theta: 40000.0,
            original_seq_len: 0,
            rope_theta: 10000.0,
            rope_factor: 40.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            index_n_heads: 16,
            index_head_dim: 64,
            index_topk: 64,
            candidate_source_layer: -1,
            candidate_topk_blocks: 0,
            candidate_block_size: 0,
            hc_mult: 4,
            hc_sinkhorn_iters: 20,
            hc_eps: 1e-6,
            engram_layer_ids: vec![],
            engram_num_embeddings: vec![],
            engram_max_ngram_size: 1,
            engram_vocab_size: 0,
            engram_n_heads: 0,
            engram_head_dim: 0,
            engram_pad_id: 2,
            engram_compressed_vocab_size: 0,
            vision_n_layers: 0,
            vision_dim: 1024,
            vision_n_heads: 16,
            vision_inter_dim: 2816,
            vision_patch_size: 14,
            vision_rope_theta: 10000.0,
            vision_downsample_ratio: 3,
            vision_max_n_token: 1024,
            vision_min_pixels: 544 * 544,
            vision_max_wh_ratio: None,
            image_token_id: 129264,
            dspark_block_size: 0,
            dspark_noise_token_id: 0,
            dspark_target_layer_ids: vec![],
            dspark_markov_rank: 256,
            dspark_n_routed_experts: 0,
            dspark_n_activated_experts: 0,
            bos_token_id: 0,
            eos_token_id: 1,
            sums: tf_core::ops::SumOrder::Lanes32,
            wo_a_lanes8: true,
        }
    }
}

impl Config {
    /// Routed and activated expert counts of a layer (DSpark stages have their own).
    pub fn moe_config(&self, layer: usize) -> (usize, usize) {
        if layer < self.n_layers {
            return (self.n_routed_experts, self.n_activated_experts);
        }
        let pick = |a: usize, b: usize| if a == 0 { b } else { a };
        (
            pick(self.dspark_n_routed_experts, self.n_routed_experts),
            pick(self.dspark_n_activated_experts, self.n_activated_experts),
        )
    }

    /// Backbone plus DSpark stages.
    pub fn total_layers(&self) -> usize {
        self.n_layers + self.n_mtp_layers
    }

    /// How this model's RMSNorms run.
    pub fn norm(&self) -> crate::linear::Norm {
        crate::linear::Norm { eps: self.norm_eps, sums: self.sums }
    }
}
