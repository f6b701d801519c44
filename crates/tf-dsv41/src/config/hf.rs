//! Hugging Face `config.json` (`text_config` names) translated into reference names.

use super::ConfigError;
use serde_json::{Map, Value};

/// (HF key, reference key) for fields that only change name.
const RENAMES: &[(&str, &str)] = &[
    ("hidden_size", "dim"),
    ("num_hidden_layers", "n_layers"),
    ("num_nextn_predict_layers", "n_mtp_layers"),
    ("num_attention_heads", "n_heads"),
    ("qk_rope_head_dim", "rope_head_dim"),
    ("sliding_window", "window_size"),
    ("kv_source_layer_ids", "kv_source_layers"),
    ("index_source_layer_ids", "index_source_layers"),
    ("candidate_source_layer_id", "candidate_source_layer"),
    ("max_position_embeddings", "max_seq_len"),
    ("num_experts_per_tok", "n_activated_experts"),
    ("moe_intermediate_size", "moe_inter_dim"),
    ("scoring_func", "score_func"),
    ("routed_scaling_factor", "route_scale"),
    ("rms_norm_eps", "norm_eps"),
    ("engram_pad_token_id", "engram_pad_id"),
    ("dspark_num_experts_per_tok", "dspark_n_activated_experts"),
];

/// Keys of the HF config that carry no model shape, or are checked here and dropped.
const IGNORED: &[&str] = &[
    "model_type",
    "architectures",
    "dtype",
    "torch_dtype",
    "hidden_act",
    "topk_method",
    "num_key_value_heads",
    "num_hash_layers",
    "rope_scaling",
    "pad_token_id",
    "tie_word_embeddings",
    "initializer_range",
    "use_cache",
    "transformers_version",
    "attention_bias",
    "attention_dropout",
];

fn expect(field: &str, v: Option<&Value>, want: i64) -> Result<(), ConfigError> {
    match v.and_then(Value::as_i64) {
        None => Ok(()),
        Some(x) if x == want => Ok(()),
        Some(x) => Err(ConfigError::field(field, format!("must be {want} for DeepSeek-V4.1, found {x}"))),
    }
}

/// The reference-named JSON object for an HF config (with or without a `text_config` wrapper).
pub fn to_reference_names(hf: &Value) -> Result<Map<String, Value>, ConfigError> {
    let top = hf.as_object().ok_or_else(|| ConfigError::field("config.json", "is not a JSON object"))?;
    let text = top.get("text_config").and_then(Value::as_object).unwrap_or(top);
    expect("num_key_value_heads", text.get("num_key_value_heads"), 1)?;
    expect("num_hash_layers", text.get("num_hash_layers"), 0)?;
    if let Some(t) = text.get("topk_method").and_then(Value::as_str)
        && t != "noaux_tc"
    {
        return Err(ConfigError::field("topk_method", format!("must be noaux_tc, found {t}")));
    }
    let mut out = Map::new();
    for (k, v) in text {
        if IGNORED.contains(&k.as_str()) || k == "text_config" || k == "vision_config" || k == "quantization_config" {
            continue;
        }
        let name = RENAMES.iter().find(|(h, _)| h == k).map_or(k.as_str(), |(_, r)| r);
        out.insert(name.to_string(), v.clone());
    }
    if let Some(rs) = text.get("rope_scaling").and_then(Value::as_object) {
        for (h, r) in [
            ("factor", "rope_factor"),
            ("original_max_position_embeddings", "original_seq_len"),
            ("beta_fast", "beta_fast"),
            ("beta_slow", "beta_slow"),
        ] {
            if let Some(v) = rs.get(h) {
                out.insert(r.into(), v.clone());
            }
        }
    }
    for key in ["image_token_id", "bos_token_id", "eos_token_id"] {
        if let Some(v) = top.get(key).or_else(|| text.get(key)) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(q) = top.get("quantization_config").and_then(Value::as_object) {
        if let Some(e) = q.get("expert_dtype") {
            out.insert("expert_dtype".into(), e.clone());
        }
        if let Some(b) = q.get("weight_block_size").and_then(Value::as_array)
            && b.iter().any(|x| x.as_u64() != Some(32))
        {
            return Err(ConfigError::field("quantization_config.weight_block_size", "must be [32, 32] for V4.1"));
        }
    }
    out.insert("vision_n_layers".into(), 0.into());
    if let Some(v) = top.get("vision_config").and_then(Value::as_object) {
        for (h, r) in [
            ("num_hidden_layers", "vision_n_layers"),
            ("hidden_size", "vision_dim"),
            ("num_attention_heads", "vision_n_heads"),
            ("intermediate_size", "vision_inter_dim"),
            ("patch_size", "vision_patch_size"),
            ("rope_theta", "vision_rope_theta"),
            ("downsample_ratio", "vision_downsample_ratio"),
            ("max_image_tokens", "vision_max_n_token"),
            ("min_pixels", "vision_min_pixels"),
            ("max_wh_ratio", "vision_max_wh_ratio"),
        ] {
            if let Some(x) = v.get(h) {
                out.insert(r.into(), x.clone());
            }
        }
    }
    Ok(out)
}
