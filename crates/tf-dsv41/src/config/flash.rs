//! The released V4.1-Flash config, for tests of the real shapes and the flash-shaped synthetic model.

use super::Config;

impl Config {
    /// The released V4.1-Flash shapes (dsv41 §1) in reference names: 40 layers, 3 DSpark stages, Engram at 1 and 14.
    pub fn v41_flash() -> Config {
        let mut ratios = vec![0, 0];
        ratios.extend([2; 18]);
        ratios.extend([1; 20]);
        ratios.extend([0; 3]);
        Config {
            max_seq_len: 1 << 20,
            dim: 5120,
            moe_inter_dim: 2304,
            n_layers: 40,
            n_mtp_layers: 3,
            n_heads: 64,
            n_routed_experts: 384,
            n_activated_experts: 6,
            route_scale: 1.5,
            swiglu_limit: 10.0,
            q_lora_rank: 1280,
            head_dim: 512,
            rope_head_dim: 64,
            o_groups: 8,
            o_lora_rank: 1024,
            window_size: 128,
            compress_ratios: ratios,
            kv_source_layers: vec![2, 8, 14, 20],
            index_source_layers: vec![2, 8, 14, 20, 24, 28, 32, 36],
            compress_rope_theta: 160000.0,
            original_seq_len: 65536,
            rope_factor: 16.0,
            index_n_heads: 32,
            index_head_dim: 128,
            index_topk: 512,
            candidate_source_layer: 20,
            candidate_topk_blocks: 2048,
            candidate_block_size: 8,
            engram_layer_ids: vec![1, 14],
            engram_num_embeddings: vec![384006168, 384016682],
            engram_max_ngram_size: 4,
            engram_vocab_size: 16_000_000,
            engram_n_heads: 8,
            engram_head_dim: 256,
            engram_compressed_vocab_size: 99092,
            dspark_block_size: 5,
            dspark_noise_token_id: 128799,
            dspark_target_layer_ids: vec![37, 38, 39],
            dspark_n_routed_experts: 128,
            dspark_n_activated_experts: 3,
            ..Config::default()
        }
    }
}
