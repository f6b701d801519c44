//! TensorFold's published EXL3 layout (`Mia-AiLab/DeepSeek-V4.1-Flash-EXL3-2.9bpw`, as ashhart/TensorFold's CUDA loader reads it): a checkpoint holding exactly those keys loads.

use std::collections::BTreeSet;
use tf_core::{Checkpoint, Tensor};
use tf_dsv41::tiny::exl3::{Exl3Mode, convert};
use tf_dsv41::tiny::{TinyKind, write_checkpoint};
use tf_dsv41::{Config, Model, Options};
use tf_exl3::exl3::Codebook;

/// Every key TensorFold's loaders read for `cfg` (ashhart's `cuda/weights.py`, plus the fork's confidence head), from their rules, not from ours.
fn tensorfold_keys(cfg: &Config) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut exl3 = |k: String| {
        for part in ["trellis", "suh", "svh", "mul1"] {
            keys.insert(format!("{k}.{part}"));
        }
    };
    let blocks = (0..cfg.n_layers)
        .map(|l| (l, format!("layers.{l}.")))
        .chain((0..cfg.n_mtp_layers).map(|j| (cfg.n_layers + j, format!("mtp.{j}."))));
    let mut plain = Vec::new();
    for (l, p) in blocks {
        for m in ["wq_a", "wkv", "wq_b", "wo_b"] {
            exl3(format!("{p}attn.{m}"));
        }
        (0..cfg.o_groups).for_each(|g| exl3(format!("{p}attn.wo_a.slice.{g}")));
        let (experts, _) = cfg.moe_config(l);
        for w in ["w1", "w2", "w3"] {
            (0..experts).for_each(|e| exl3(format!("{p}ffn.experts.{e}.{w}")));
            exl3(format!("{p}ffn.shared_experts.{w}"));
        }
        let (kv, index) = (
            l < cfg.n_layers && cfg.kv_source_layers.contains(&l),
            l < cfg.n_layers && cfg.index_source_layers.contains(&l),
        );
        if kv {
            exl3(format!("{p}attn.compressor.wkv"));
            if cfg.compress_ratios[l] == 2 {
                exl3(format!("{p}attn.compressor.wgate"));
            }
            plain.push(format!("{p}attn.compressor.norm.weight"));
        }
        if index {
            exl3(format!("{p}attn.indexer.wq_b"));
            plain.push(format!("{p}attn.indexer.weights_proj.weight"));
            if kv {
                exl3(format!("{p}attn.indexer.wk"));
                plain.push(format!("{p}attn.indexer.k_norm.weight"));
            }
        }
        if l < cfg.n_layers && cfg.engram_layer_ids.contains(&l) {
            exl3(format!("{p}engram.wkv"));
            plain.extend(["q_weight", "k_weight"].map(|w| format!("{p}engram.{w}")));
        }
        for site in ["attn", "ffn"] {
            plain.extend(["fn", "base", "scale"].map(|t| format!("{p}hc_{site}_{t}")));
            plain.push(format!("{p}{site}_norm.weight"));
        }
        plain.extend(
            ["attn.q_norm.weight", "attn.kv_norm.weight", "attn.attn_sink", "ffn.gate.weight", "ffn.gate.bias"]
                .map(|t| format!("{p}{t}")),
        );
    }
    exl3("head".into());
    if cfg.n_mtp_layers > 0 {
        exl3("mtp.0.main_proj".into());
        let last = cfg.n_mtp_layers - 1;
        plain.push("mtp.0.main_norm.weight".into());
        // ashhart's loader skips DSpark's confidence head; bertholomus/TensorFold reads it from the same checkpoint, so it is there.
        plain.push(format!("mtp.{last}.confidence_head.proj.weight"));
        plain.extend(
            ["norm.weight", "markov_head.embed.weight", "markov_head.head.weight"].map(|t| format!("mtp.{last}.{t}")),
        );
    }
    plain.extend(["embed.weight".into(), "norm.weight".into()]);
    keys.extend(plain);
    keys
}

#[test]
fn a_checkpoint_with_exactly_tensorfolds_keys_loads() {
    let tmp = |_| tempfile::tempdir().unwrap();
    let [src, dst, bare] = [0, 1, 2].map(tmp);
    write_checkpoint(TinyKind::Small, 0, src.path()).unwrap();
    convert(src.path(), dst.path(), Codebook::Mul1, Exl3Mode::Random, 5).unwrap();
    let ck = Checkpoint::open(dst.path()).unwrap();
    let cfg = Model::load(dst.path(), Options::default()).unwrap().cfg;
    let want = tensorfold_keys(&cfg);
    let have: BTreeSet<String> = ck.names().map(str::to_string).collect();
    let missing: Vec<&String> = want.difference(&have).collect();
    let extra: Vec<&String> = have.difference(&want).collect();
    println!("converted keys TensorFold does not read: {extra:?}");
    assert!(missing.is_empty(), "our converter lacks keys TensorFold reads: {missing:?}");
    let kept: Vec<Tensor> = want.iter().map(|n| ck.get(n).unwrap()).collect();
    let refs: Vec<(&str, &Tensor)> = want.iter().map(String::as_str).zip(&kept).collect();
    tf_core::st::write::write_file(&bare.path().join("model.safetensors"), &refs, None).unwrap();
    for f in ["config.json", "engram_token_map.u32"] {
        std::fs::copy(dst.path().join(f), bare.path().join(f)).unwrap();
    }
    let m = Model::load(bare.path(), Options::default().with_engram_from(Some(src.path())));
    let m = m.unwrap_or_else(|e| panic!("TensorFold's key set must load: {e}"));
    // The keys TensorFold does not read (the vision router bias, the tables) change nothing for text.
    let full = Model::load(dst.path(), Options::default()).unwrap();
    let prompt: Vec<u32> = (0..24).map(|i| 3 + (i * 7919 % 5000) as u32).collect();
    let run = |m: &Model| m.prefill(&mut m.new_state(), &prompt, true).unwrap().unwrap();
    assert_eq!(run(&m), run(&full));
}
