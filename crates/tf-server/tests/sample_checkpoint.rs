//! The committed sample checkpoint is what its generator makes, and `tf inspect` reads it.

use std::path::{Path, PathBuf};
use std::process::Command;
use tf_core::formats::{f32_to_e4m3, pack_fp4, to_bf16};
use tf_core::st::{INDEX_FILE, write};
use tf_core::{DType, Tensor};

fn sample_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/sample-checkpoint")
}

/// Integer-made values, so the bytes do not depend on the platform's libm.
fn wave(n: usize, k: usize) -> Vec<f32> {
    (0..n).map(|i| (i * k % 97) as f32 / 48.5 - 1.0).collect()
}

fn bf16_t(shape: &[usize], k: usize) -> Tensor {
    let v: Vec<_> = wave(shape.iter().product(), k).into_iter().map(to_bf16).collect();
    Tensor::from_bf16(shape, &v).unwrap()
}

fn fp8_t(shape: &[usize], k: usize) -> Tensor {
    let v: Vec<u8> = wave(shape.iter().product(), k).into_iter().map(|x| f32_to_e4m3(x * 100.0)).collect();
    Tensor::from_bytes(DType::F8E4M3, shape, &v).unwrap()
}

/// Writes the sample: dsv41 names and dtypes (bf16, FP8 + E8M0 32×32 scales, packed FP4 + scales, f32) in two shards.
fn generate(dir: &Path) {
    let codes: Vec<u8> = (0..32 * 32).map(|i| (i * 7 % 16) as u8).collect();
    let fp4 = Tensor::from_bytes(DType::I8, &[32, 16], &pack_fp4(&codes)).unwrap();
    let fp4_scale = Tensor::from_bytes(DType::F8E8M0, &[32, 1], &[126; 32]).unwrap();
    let sink = Tensor::from_f32(&[4], &[0.5, -0.25, 1.0, 0.0]).unwrap();
    let shard1 = [
        ("embed.weight", bf16_t(&[16, 64], 37)),
        ("layers.0.attn.wq_a.weight", fp8_t(&[32, 64], 11)),
        ("layers.0.attn.wq_a.scale", Tensor::from_bytes(DType::F8E8M0, &[1, 2], &[120, 121]).unwrap()),
        ("layers.0.attn.attn_sink", sink),
    ];
    let shard2 = [
        ("layers.0.ffn.experts.0.w1.weight", fp4),
        ("layers.0.ffn.experts.0.w1.scale", fp4_scale),
        ("norm.weight", bf16_t(&[64], 5)),
        ("head.weight", bf16_t(&[16, 64], 29)),
    ];
    let mut map = serde_json::Map::new();
    for (file, tensors) in
        [("model-00001-of-00002.safetensors", &shard1), ("model-00002-of-00002.safetensors", &shard2)]
    {
        let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
        write::write_file(&dir.join(file), &refs, None).unwrap();
        for (n, _) in tensors.iter() {
            map.insert(n.to_string(), file.into());
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(dir.join(INDEX_FILE), serde_json::to_string_pretty(&index).unwrap() + "\n").unwrap();
}

#[test]
fn committed_sample_matches_generator() {
    if std::env::var_os("TF_REGEN_SAMPLE").is_some() {
        std::fs::create_dir_all(sample_dir()).unwrap();
        generate(&sample_dir());
    }
    let tmp = tempfile::tempdir().unwrap();
    generate(tmp.path());
    for f in ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", INDEX_FILE] {
        let want = std::fs::read(tmp.path().join(f)).unwrap();
        let have = std::fs::read(sample_dir().join(f)).expect("sample missing: run with TF_REGEN_SAMPLE=1");
        assert!(want == have, "{f} differs from its generator; regenerate with TF_REGEN_SAMPLE=1");
    }
}

#[test]
fn tf_inspect_lists_tensors_and_totals() {
    let out = Command::new(env!("CARGO_BIN_EXE_tf")).arg("inspect").arg(sample_dir()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("layers.0.attn.wq_a.weight") && text.contains("F8_E4M3") && text.contains("[32, 64]"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("head.weight")
            && l.contains("2048")
            && l.ends_with("model-00002-of-00002.safetensors")),
        "{text}"
    );
    assert!(text.contains("total           8 tensors") && text.contains("in 2 shard(s)"), "{text}");
    let filtered = Command::new(env!("CARGO_BIN_EXE_tf"))
        .args(["inspect", "--filter", "experts"])
        .arg(sample_dir())
        .output()
        .unwrap();
    let ftext = String::from_utf8(filtered.stdout).unwrap();
    assert!(ftext.contains("total           2 tensors") && !ftext.contains("embed.weight"), "{ftext}");
}

#[test]
fn tf_inspect_reports_a_broken_checkpoint_and_fails() {
    let tmp = tempfile::tempdir().unwrap();
    generate(tmp.path());
    let shard = tmp.path().join("model-00002-of-00002.safetensors");
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() - 10]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tf")).arg("inspect").arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("model-00002-of-00002.safetensors") && err.contains("truncated"), "{err}");
    let usage = Command::new(env!("CARGO_BIN_EXE_tf")).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
}
