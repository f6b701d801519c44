//! `make-tiny` checkpoints: official layout, exact inventory, determinism, configs and weight statistics.

use std::path::Path;
use tf_core::{Checkpoint, DType};
use tf_dsv41::Config;
use tf_dsv41::inventory::{audit, expected_tensors};
use tf_dsv41::tiny::{TinyKind, small_config, tiny_config, write_checkpoint};
use tf_dsv41::wquant::{dequant_fp4, dequant_fp8_tiles};

fn spec(cfg: &Config, name: &str) -> Option<(DType, Vec<usize>)> {
    expected_tensors(cfg).into_iter().find(|t| t.name == name).map(|t| (t.dtype, t.shape))
}

fn has(cfg: &Config, name: &str) -> bool {
    spec(cfg, name).is_some()
}

#[test]
fn tiny_inventory_has_the_spec_shapes() {
    let c = tiny_config();
    let want: &[(&str, DType, &[usize])] = &[
        ("embed.weight", DType::BF16, &[512, 256]),
        ("head.weight", DType::BF16, &[512, 256]),
        ("layers.0.attn.wq_a.weight", DType::F8E4M3, &[128, 256]),
        ("layers.0.attn.wq_a.scale", DType::F8E8M0, &[4, 8]),
        ("layers.0.attn.wq_b.weight", DType::F8E4M3, &[512, 128]),
        ("layers.0.attn.wo_a.weight", DType::BF16, &[128, 256]),
        ("layers.0.attn.wo_b.weight", DType::F8E4M3, &[256, 128]),
        ("layers.0.attn.attn_sink", DType::F32, &[4]),
        ("layers.2.attn.compressor.wkv.weight", DType::BF16, &[128, 256]),
        ("layers.2.attn.compressor.wgate.weight", DType::BF16, &[128, 256]),
        ("layers.2.attn.indexer.wq_b.weight", DType::F8E4M3, &[256, 128]),
        ("layers.2.attn.indexer.weights_proj.weight", DType::BF16, &[4, 256]),
        ("layers.4.attn.indexer.wk.weight", DType::BF16, &[64, 128]),
        ("layers.0.ffn.gate.weight", DType::BF16, &[8, 256]),
        ("layers.0.ffn.gate.bias_vl", DType::F32, &[8]),
        ("layers.0.ffn.experts.7.w1.weight", DType::I8, &[128, 128]),
        ("layers.0.ffn.experts.7.w1.scale", DType::F8E8M0, &[128, 8]),
        ("layers.0.ffn.experts.7.w2.weight", DType::I8, &[256, 64]),
        ("layers.0.ffn.experts.7.w2.scale", DType::F8E8M0, &[256, 4]),
        ("layers.0.ffn.shared_experts.w2.weight", DType::F8E4M3, &[256, 128]),
        ("layers.1.engram.embed.weight", DType::F8E4M3, &[630, 32]),
        ("layers.1.engram.embed.scale", DType::F8E8M0, &[630, 1]),
        ("layers.2.engram.embed.weight", DType::F8E4M3, &[834, 32]),
        ("layers.1.engram.wkv.weight", DType::F8E4M3, &[1280, 192]),
        ("layers.1.engram.q_weight", DType::BF16, &[4, 256]),
        ("layers.0.hc_attn_fn", DType::F32, &[24, 1024]),
        ("layers.0.hc_ffn_base", DType::F32, &[24]),
        ("layers.0.hc_ffn_scale", DType::F32, &[3]),
        ("mtp.0.main_proj.weight", DType::F8E4M3, &[256, 768]),
        ("mtp.0.main_norm.weight", DType::BF16, &[256]),
        ("mtp.1.ffn.experts.3.w3.weight", DType::I8, &[128, 128]),
        ("mtp.2.markov_head.embed.weight", DType::BF16, &[512, 32]),
        ("mtp.2.markov_head.head.weight", DType::BF16, &[512, 32]),
        ("mtp.2.confidence_head.proj.weight", DType::BF16, &[1, 288]),
        ("mtp.2.norm.weight", DType::BF16, &[256]),
    ];
    for (name, dtype, shape) in want {
        assert_eq!(spec(&c, name), Some((*dtype, shape.to_vec())), "{name}");
    }
    let layers_with = |suffix: &str| (0..8).filter(|l| has(&c, &format!("layers.{l}.{suffix}"))).collect::<Vec<_>>();
    assert_eq!(layers_with("attn.compressor.wkv.weight"), [2, 4]);
    assert_eq!(layers_with("attn.compressor.wgate.weight"), [2]);
    assert_eq!(layers_with("attn.indexer.wq_b.weight"), [2, 4, 6]);
    assert_eq!(layers_with("attn.indexer.k_norm.weight"), [2, 4]);
    assert_eq!(layers_with("engram.wkv.weight"), [1, 2]);
    assert!(!has(&c, "mtp.0.ffn.experts.4.w1.weight"), "DSpark stages have 4 experts");
    assert!(!has(&c, "mtp.0.attn.compressor.norm.weight") && !has(&c, "mtp.1.markov_head.head.weight"));
    assert!(!has(&c, "mtp.0.embed.weight") && !has(&c, "mtp.2.head.weight"), "stages share the trunk's");
    assert!(expected_tensors(&c).iter().all(|t| !t.name.starts_with("vision")));
}

#[test]
fn engram_rows_follow_the_primes() {
    assert_eq!(tf_dsv41::tiny::engram_rows(97, 2, 4, 2), [630, 834], "spec §18");
    assert_eq!(tiny_config().engram_num_embeddings, [630, 834]);
    let s = small_config();
    assert_eq!(s.engram_num_embeddings, tf_dsv41::tiny::engram_rows(1000, 2, 4, 2));
    assert_eq!((s.vocab_size, s.engram_compressed_vocab_size, s.dspark_noise_token_id), (129_280, 99_092, 128_799));
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for sub in [dir.to_path_buf(), dir.join("inference")] {
        let mut names: Vec<_> = std::fs::read_dir(&sub).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        for p in names.into_iter().filter(|p| p.is_file()) {
            out.push((p.strip_prefix(dir).unwrap().display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
    out
}

fn values(ckpt: &Checkpoint, name: &str) -> Vec<f32> {
    ckpt.get(name).unwrap().to_f32_vec().unwrap()
}

fn moments(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = v.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

fn near(got: f64, want: f64, rel: f64, what: &str) {
    assert!((got - want).abs() <= rel * want.abs(), "{what}: {got} vs {want}");
}

/// Writes, reopens and checks one checkpoint; returns the directory's files.
fn write_and_check(kind: TinyKind, seed: u64, dir: &Path) -> Vec<(String, Vec<u8>)> {
    let w = write_checkpoint(kind, seed, dir).unwrap();
    let cfg = kind.config();
    assert_eq!(w.n_tensors, expected_tensors(&cfg).len());
    let ckpt = Checkpoint::open(dir).unwrap();
    assert!(ckpt.shards().len() >= 2, "sharded");
    let a = audit(&ckpt, &cfg);
    assert!(a.is_exact(), "{a:?}");
    let hf = Config::from_hf_json(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(Config::load(dir).unwrap(), hf, "inference/config.json and config.json agree");
    assert_eq!(hf, cfg);
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("model.safetensors.index.json")).unwrap()).unwrap();
    assert_eq!(index["metadata"]["total_size"].as_u64(), Some(w.tensor_bytes));
    let map = std::fs::read(dir.join("engram_token_map.u32")).unwrap();
    assert_eq!(map.len(), cfg.vocab_size * 4);
    let tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap()).unwrap();
    assert!(tok["model"]["vocab"].as_object().unwrap().len() <= cfg.vocab_size);
    check_statistics(&ckpt, &cfg);
    files(dir)
}

fn check_statistics(ckpt: &Checkpoint, cfg: &Config) {
    let fan = |n: usize| 1.0 / (n as f64).sqrt();
    let (_, rms) = moments(&values(ckpt, "embed.weight"));
    assert!((0.09..=0.15).contains(&rms), "embedding RMS {rms}");
    for (norm, mean) in [("attn_norm", 0.025), ("ffn_norm", 0.2), ("attn.q_norm", 0.97), ("attn.kv_norm", 0.4)] {
        near(moments(&values(ckpt, &format!("layers.3.{norm}.weight"))).0, mean, 0.1, norm);
    }
    near(moments(&values(ckpt, "layers.2.attn.compressor.norm.weight")).0, 0.6, 0.1, "compressor.norm");
    near(moments(&values(ckpt, "layers.4.attn.indexer.k_norm.weight")).0, 0.5, 0.1, "k_norm");
    let q = ckpt.get("layers.0.attn.wq_a.weight").unwrap();
    let s = ckpt.get("layers.0.attn.wq_a.scale").unwrap();
    let w = dequant_fp8_tiles(q.bytes(), s.bytes(), cfg.q_lora_rank, cfg.dim);
    near(moments(&w).1, 1.6 * fan(cfg.dim), 0.1, "wq_a std");
    let q = ckpt.get("layers.0.ffn.experts.0.w1.weight").unwrap();
    let s = ckpt.get("layers.0.ffn.experts.0.w1.scale").unwrap();
    near(moments(&dequant_fp4(q.bytes(), s.bytes())).1, 1.5 * fan(cfg.dim), 0.2, "expert w1 std");
    near(moments(&values(ckpt, "layers.0.ffn.gate.weight")).1, 2.9 * fan(cfg.dim), 0.1, "gate std");
    near(moments(&values(ckpt, "layers.0.hc_attn_fn")).1, fan(cfg.hc_mult * cfg.dim), 0.1, "hc fn std");
    let (m, sd) = moments(&values(ckpt, "layers.0.hc_attn_scale"));
    assert!((m - 1.0).abs() < 0.3 && sd < 0.3, "hc scale ≈ 1: {m} ± {sd}");
    let sink = values(ckpt, "layers.0.attn.attn_sink");
    assert!(sink.iter().all(|x| x.abs() < 2.0), "modest sinks {sink:?}");
}

#[test]
fn tiny_checkpoint_is_complete_and_deterministic() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let fa = write_and_check(TinyKind::Tiny, 7, a.path());
    let fb = write_and_check(TinyKind::Tiny, 7, b.path());
    assert_eq!(fa.len(), fb.len());
    for ((na, ba), (nb, bb)) in fa.iter().zip(&fb) {
        assert_eq!(na, nb);
        assert!(ba == bb, "{na} differs between two writes with the same seed");
    }
    let names: Vec<&str> = fa.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"model-00001-of-00002.safetensors") && names.contains(&"model-00002-of-00002.safetensors"));
    let map = std::fs::read(a.path().join("engram_token_map.u32")).unwrap();
    let map: Vec<u32> = map.chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!((map[2], map[511], map.iter().max().copied()), (1, 255, Some(255)));
    let c = tempfile::tempdir().unwrap();
    write_checkpoint(TinyKind::Tiny, 8, c.path()).unwrap();
    let other = std::fs::read(c.path().join("model-00001-of-00002.safetensors")).unwrap();
    assert!(other != fa.iter().find(|(n, _)| n == "model-00001-of-00002.safetensors").unwrap().1, "seed matters");
}

#[test]
fn tiny_tokenizer_has_the_reserved_ids() {
    let dir = tempfile::tempdir().unwrap();
    write_checkpoint(TinyKind::Tiny, 0, dir.path()).unwrap();
    let tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("tokenizer.json")).unwrap()).unwrap();
    let vocab = tok["model"]["vocab"].as_object().unwrap();
    assert_eq!(vocab.len(), 512);
    let mut ids: Vec<u64> = vocab.values().map(|v| v.as_u64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..512).collect::<Vec<u64>>(), "one token per id");
    for (text, id) in
        [("<｜begin▁of▁sentence｜>", 0), ("<｜end▁of▁sentence｜>", 1), ("<｜▁pad▁｜>", 2), ("w2", 4), ("W2", 5)]
    {
        assert_eq!(vocab[text].as_u64(), Some(id), "{text}");
    }
    let added = tok["added_tokens"].as_array().unwrap();
    assert!(added.iter().any(|t| t["content"] == "<｜User｜>" && t["id"] == 480));
}

#[test]
fn small_checkpoint_uses_the_deepseek_v4_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    write_and_check(TinyKind::Small, 0, dir.path());
    let assets = tf_dsv41::gate_model::deepseek_v4_assets();
    let same = |a: &str, b: &str| std::fs::read(dir.path().join(a)).unwrap() == std::fs::read(assets.join(b)).unwrap();
    assert!(same("tokenizer.json", "tokenizer.json") && same("engram_token_map.u32", "token_map.u32"));
    eprintln!("small checkpoint written and checked in {:?}", t.elapsed());
}
