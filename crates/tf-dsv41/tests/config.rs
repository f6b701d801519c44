//! Config parsing, validation and layer roles: the tiny config of spec §18 and the released V4.1 shapes.

use tf_dsv41::config::{AttnMode, Config, RopeKind, roles};
use tf_dsv41::rope::Rope;

fn tiny() -> Config {
    Config::from_hf_json(include_str!("fixtures/tiny_hf_config.json")).expect("tiny config is valid")
}

fn v41() -> Config {
    Config::v41_flash()
}

#[test]
fn tiny_hf_config_maps_to_reference_names() {
    let c = tiny();
    assert_eq!((c.dim, c.n_layers, c.n_mtp_layers, c.head_dim, c.rope_head_dim), (256, 8, 3, 128, 32));
    assert_eq!((c.window_size, c.rope_factor, c.original_seq_len, c.max_seq_len), (16, 4.0, 32, 256));
    assert_eq!((c.n_activated_experts, c.moe_inter_dim, c.engram_pad_id, c.image_token_id), (2, 128, 2, 500));
    assert_eq!((c.dspark_n_activated_experts, c.vision_n_layers, c.vision_dim), (2, 2, 64));
    assert_eq!(c.moe_config(8), (4, 2), "DSpark stages use their own expert counts");
    let reference = serde_json::to_string(&c).unwrap();
    assert_eq!(Config::from_reference_json(&reference).unwrap(), c, "reference-named JSON round-trips");
}

#[test]
fn tiny_roles_match_the_layer_map() {
    let r = roles(&tiny());
    let modes: Vec<AttnMode> = r.iter().map(|x| x.mode).collect();
    use AttnMode::*;
    assert_eq!(modes, [Swa, Swa, Full, Reuse, Full, Reuse, Reindex, Reuse, Swa, Swa, Swa]);
    assert_eq!((r[3].kv_owner, r[3].sel_owner), (Some(2), Some(2)));
    assert_eq!((r[7].kv_owner, r[7].sel_owner), (Some(4), Some(6)), "KV from 4 but top-k from 6");
    assert!(r[4].is_candidate_source && !r[4].uses_candidates);
    assert!(r[6].uses_candidates && !r[6].is_kv_source);
    assert_eq!(r[0].rope, RopeKind::Plain);
    assert_eq!(r[2].rope, RopeKind::Yarn);
    assert!(r[8].is_dspark && r[8].rope == RopeKind::Plain);
}

#[test]
fn released_roles_match_spec_table() {
    let c = v41();
    c.validate().unwrap();
    let r = roles(&c);
    for l in [2, 8, 14, 20] {
        assert_eq!(r[l].mode, AttnMode::Full, "layer {l}");
    }
    for l in [24, 28, 32, 36] {
        assert_eq!(r[l].mode, AttnMode::Reindex, "layer {l}");
        assert_eq!(r[l].kv_owner, Some(20));
    }
    for l in [3, 7, 9, 19, 21, 25, 27, 39] {
        assert_eq!(r[l].mode, AttnMode::Reuse, "layer {l}");
    }
    assert_eq!((r[26].kv_owner, r[26].sel_owner), (Some(20), Some(24)), "pitfall 8");
    assert_eq!((r[13].kv_owner, r[13].sel_owner), (Some(8), Some(8)));
    assert!(r[20].is_candidate_source);
    assert!(r[24].uses_candidates && !r[20].uses_candidates && !r[14].uses_candidates);
    assert_eq!(
        r.iter().filter(|x| x.rope == RopeKind::Plain).count(),
        5,
        "layers 0, 1 and the 3 DSpark stages (pitfall 1)"
    );
}

#[test]
fn validation_names_the_field() {
    let bad = |f: fn(&mut Config), field: &str| {
        let mut c = v41();
        f(&mut c);
        let e = c.validate().expect_err(field);
        assert_eq!(e.field, field, "{e}");
    };
    bad(|c| c.compress_ratios[5] = 3, "compress_ratios");
    bad(|c| c.compress_ratios.pop().map(drop).unwrap_or(()), "compress_ratios");
    bad(|c| c.kv_source_layers = vec![2, 8, 14], "kv_source_layers");
    bad(|c| c.index_source_layers = vec![2, 8, 14, 24], "index_source_layers");
    bad(|c| c.candidate_source_layer = 21, "candidate_source_layer");
    bad(|c| c.dim = 5100, "dim");
    bad(|c| c.head_dim = 500, "head_dim");
    bad(|c| c.n_shared_experts = 2, "n_shared_experts");
    bad(|c| c.score_func = "softmax".into(), "score_func");
    bad(|c| c.engram_layer_ids = vec![1, 40], "engram_layer_ids");
    bad(|c| c.dspark_target_layer_ids = vec![40], "dspark_target_layer_ids");
    let e = Config::from_reference_json(r#"{"dimm": 5}"#).unwrap_err();
    assert_eq!(e.field, "dimm");
    let hf = r#"{"text_config": {"num_key_value_heads": 2}}"#;
    assert_eq!(Config::from_hf_json(hf).unwrap_err().field, "num_key_value_heads");
}

#[test]
fn yarn_table_follows_the_formula() {
    let c = v41();
    let plain = Rope::new(&c, RopeKind::Plain);
    let yarn = Rope::new(&c, RopeKind::Yarn);
    assert_eq!(plain.inv_freq[0], 1.0);
    assert!((plain.inv_freq[1] - 10000f32.powf(-2.0 / 64.0)).abs() < 1e-7);
    let corr = |r: f64| 64.0 * (65536.0 / (r * 2.0 * std::f64::consts::PI)).ln() / (2.0 * 160000f64.ln());
    let (low, high) = (corr(32.0).floor() as usize, corr(1.0).ceil() as usize);
    let base = |i: usize| 1.0 / 160000f32.powf((2 * i) as f32 / 64.0);
    assert_eq!(yarn.inv_freq[low], base(low), "below the ramp frequencies are kept");
    assert!(
        (yarn.inv_freq[31] - base(31) / 16.0).abs() <= base(31) * 1e-6,
        "past the ramp they are divided by the factor"
    );
    assert!(high < 31 && yarn.inv_freq[high] < base(high));
    let mut x: Vec<f32> = (0..128).map(|i| i as f32 * 0.01).collect();
    let orig = x.clone();
    yarn.apply(&mut x, 777, false);
    assert_eq!(x[..64], orig[..64], "only the last rope_head_dim channels rotate");
    assert_ne!(x[64..], orig[64..]);
    yarn.apply(&mut x, 777, true);
    for (a, b) in x.iter().zip(&orig) {
        assert!((a - b).abs() < 1e-4);
    }
}

#[test]
fn the_flash_shaped_bench_configs_validate_with_and_without_dspark() {
    let plain = tf_dsv41::cuda::flash_config(8).unwrap();
    assert_eq!(plain.total_layers(), 8);
    let ds = tf_dsv41::cuda::flash_config_dspark(8).unwrap();
    assert_eq!((ds.total_layers(), ds.dspark_target_layer_ids.clone()), (11, vec![5, 6, 7]));
    let roles = tf_dsv41::config::roles(&ds);
    assert!(roles[8..].iter().all(|r| r.is_dspark && !r.is_kv_source) && !roles[7].is_dspark);
    assert_eq!(ds.moe_config(9), (128, 3), "stages route as V4.1-Flash's do");
}
