//! dsv41 from an EXL3 checkpoint on the CPU: every block-scaled linear re-stored as a trellis loads and runs, Engram tables from the original.

use tf_core::ops::qgemm::Fp8Weight;
use tf_core::rng::SplitMix64;
use tf_core::{Checkpoint, Tensor};
use tf_dsv41::qlinear::QLinear;
use tf_dsv41::tiny::exl3::{Exl3Mode, convert, exl3_tensors};
use tf_dsv41::tiny::{TinyKind, write_checkpoint};
use tf_dsv41::{Model, Options, PrefillMxfp4};
use tf_engram::IoMode;
use tf_exl3::exl3::Codebook;
use tf_exl3::exl3::encode::random_weight;

fn greedy(m: &Model, prompt: &[u32], steps: usize) -> Vec<Vec<f32>> {
    let mut st = m.new_state();
    let mut out = vec![m.prefill(&mut st, prompt, true).unwrap().unwrap()];
    for _ in 0..steps {
        let l = out.last().unwrap();
        let t = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32;
        out.push(m.decode(&mut st, &[t]).unwrap().remove(0));
    }
    out
}

#[test]
fn an_exl3_tiny_checkpoint_loads_and_runs_on_the_cpu() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_checkpoint(TinyKind::Tiny, 0, src.path()).unwrap();
    let n = convert(src.path(), dst.path(), Codebook::Mul1, Exl3Mode::Random, 1).unwrap();
    let opts = Options::default();
    let (fp8, exl3) = (Model::load(src.path(), opts).unwrap(), Model::load(dst.path(), opts).unwrap());
    let is = |q: &QLinear<Fp8Weight>| matches!(q, QLinear::Exl3(_));
    for b in &exl3.blocks {
        let a = &b.attn;
        assert!(
            [&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b].into_iter().all(is),
            "layer {}: attention linears are EXL3",
            b.role.layer
        );
        assert!(b.ffn.experts.iter().all(|e| matches!(e.w1, QLinear::Exl3(_))) && is(&b.ffn.shared.w2));
    }
    assert!(n >= exl3.blocks.len() * 4, "{n} linears converted");
    // The head is EXL3 as in TensorFold's published checkpoint, loaded as its effective matrix.
    let ck = Checkpoint::open(dst.path()).unwrap();
    assert!(ck.contains("head.trellis") && !ck.contains("head.weight"), "the head is stored as EXL3");
    let want = tf_dsv41::qlinear::exl3_dense(&ck, "head", exl3.cfg.vocab_size, exl3.cfg.dim).unwrap().unwrap();
    assert_eq!(exl3.head.w, want.w, "the model's head is the trellis' effective weight");
    assert_ne!(exl3.head.w, fp8.head.w);
    // The router and the indexer's weights_proj are fp16 there; they load as the fp16 rounding of the bf16 source.
    let f16s: Vec<&str> = ck.names().filter(|n| tf_dsv41::tiny::exl3::stored_f16(n)).collect();
    assert!(f16s.iter().any(|n| n.ends_with("ffn.gate.weight")), "the converted router is stored: {f16s:?}");
    for n in &f16s {
        assert_eq!(ck.get(n).unwrap().dtype(), tf_core::DType::F16, "{n} is fp16 as in TensorFold's checkpoint");
    }
    let f16 = |v: f32| tf_core::formats::f16_bits_to_f32(tf_core::formats::f32_to_f16_bits(v));
    for (e, f) in exl3.blocks.iter().zip(&fp8.blocks) {
        let differ = e.ffn.gate.w.iter().zip(&f.ffn.gate.w).filter(|(a, b)| a.to_bits() != f16(**b).to_bits()).count();
        assert_eq!(differ, 0, "layer {}: the fp16 router loads as stored", e.role.layer);
    }
    let e = tf_dsv41::qlinear::exl3_dense(&ck, "head", exl3.cfg.vocab_size + 200, exl3.cfg.dim).unwrap_err();
    assert!(e.to_string().contains("head.trellis"), "a head of the wrong shape is refused naming it: {e}");
    let prompt: Vec<u32> = (0..9).map(|i| 3 + i * 37).collect();
    let (a, b) = (greedy(&exl3, &prompt, 4), greedy(&exl3, &prompt, 4));
    assert!(a.iter().flatten().all(|v| v.is_finite()), "finite logits");
    assert_eq!(a, b, "deterministic");
    assert_ne!(a[0], greedy(&fp8, &prompt, 0)[0], "the EXL3 weights are the ones used");
}

#[test]
fn an_exl3_linear_that_does_not_pad_its_shape_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let w = random_weight(&mut SplitMix64::new(1), (256, 128, 2), Codebook::Mcg, 0.1);
    let tensors = exl3_tensors("layers.0.attn.wq_a", &w).unwrap();
    let refs: Vec<(&str, &tf_core::Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let path = dir.path().join("model.safetensors");
    tf_core::st::write::write_file(&path, &refs, None).unwrap();
    let ck = Checkpoint::open(&path).unwrap();
    assert!(QLinear::<Fp8Weight>::load(&ck, "layers.0.attn.wq_a", 128, 200).is_ok(), "256 pads 200");
    let e = QLinear::<Fp8Weight>::load(&ck, "layers.0.attn.wq_a", 128, 100).unwrap_err().to_string();
    assert!(e.contains("layers.0.attn.wq_a.trellis") && e.contains("pad"), "{e}");
}

#[test]
fn quantize_mode_stores_the_source_linear_in_exl3_orientation() {
    // One FP8 linear [128, 256] quantized at K = 2 comes back near its source; a transposed store would miss by the signal itself.
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (out, inp) = (128, 256);
    let mut rng = SplitMix64::new(4);
    let w: Vec<f32> = (0..out * inp).map(|_| rng.normal() * 0.05).collect();
    let (codes, scales) = tf_dsv41::wquant::quant_fp8_tiles(&w, out, inp);
    let t = |d, s: &[usize], b: &[u8]| tf_core::Tensor::from_bytes(d, s, b).unwrap();
    let tensors = [
        ("layers.0.attn.wq_a.weight", t(tf_core::DType::F8E4M3, &[out, inp], &codes)),
        ("layers.0.attn.wq_a.scale", t(tf_core::DType::F8E8M0, &[out / 32, inp / 32], &scales)),
    ];
    let refs: Vec<(&str, &tf_core::Tensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    tf_core::st::write::write_file(&src.path().join("model.safetensors"), &refs, None).unwrap();
    assert_eq!(convert(src.path(), dst.path(), Codebook::Inst3, Exl3Mode::Quantize, 2).unwrap(), 1);
    let fp8 = Fp8Weight::load(&Checkpoint::open(src.path()).unwrap(), "layers.0.attn.wq_a").unwrap();
    let q = QLinear::<Fp8Weight>::load(&Checkpoint::open(dst.path()).unwrap(), "layers.0.attn.wq_a", out, inp).unwrap();
    let x: Vec<tf_core::bf16> = (0..2 * inp).map(|_| tf_core::bf16::from_f32(rng.normal())).collect();
    let (a, b) = (fp8.forward_f32(&x, 2), q.forward_f32(&x, 2));
    let err =
        (a.iter().zip(&b).map(|(p, q)| (p - q).powi(2)).sum::<f32>() / a.iter().map(|p| p * p).sum::<f32>()).sqrt();
    assert!(err < 0.35, "relative error {err} at K = 2");
}

#[test]
fn quantize_at_stores_every_linear_at_its_k_and_the_same_bytes_twice() {
    // What `cargo xtask gate-model exl3` relies on: one K for all, and a copy whose sha256 the thresholds can name.
    let src = tempfile::tempdir().unwrap();
    let mut rng = SplitMix64::new(8);
    let (out, inp) = (128, 128);
    let mut tensors = Vec::new();
    for name in ["layers.0.attn.wq_a", "layers.0.attn.wkv"] {
        let w: Vec<f32> = (0..out * inp).map(|_| rng.normal() * 0.05).collect();
        let (codes, scales) = tf_dsv41::wquant::quant_fp8_tiles(&w, out, inp);
        tensors
            .push((format!("{name}.weight"), Tensor::from_bytes(tf_core::DType::F8E4M3, &[out, inp], &codes).unwrap()));
        let s = Tensor::from_bytes(tf_core::DType::F8E8M0, &[out / 32, inp / 32], &scales).unwrap();
        tensors.push((format!("{name}.scale"), s));
    }
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    tf_core::st::write::write_file(&src.path().join("model.safetensors"), &refs, None).unwrap();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for dst in [&a, &b] {
        assert_eq!(convert(src.path(), dst.path(), Codebook::Mul1, Exl3Mode::QuantizeAt(4), 0).unwrap(), 2);
    }
    let ck = Checkpoint::open(a.path()).unwrap();
    for name in ["layers.0.attn.wq_a", "layers.0.attn.wkv"] {
        assert_eq!(ck.get(&format!("{name}.trellis")).unwrap().shape()[2], 16 * 4, "{name} at K = 4");
    }
    let bytes = |d: &tempfile::TempDir| std::fs::read(d.path().join("model.safetensors")).unwrap();
    assert!(bytes(&a) == bytes(&b), "two conversions of one source differ");
}

#[test]
fn mxfp4_prefill_experts_serve_long_prompt_chunks_only() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_checkpoint(TinyKind::Tiny, 0, src.path()).unwrap();
    convert(src.path(), dst.path(), Codebook::Mul1, Exl3Mode::Random, 3).unwrap();
    let base = Options::default();
    let on = Options { prefill_mxfp4: Some(PrefillMxfp4 { layers: 2, min_rows: 8 }), ..base };
    let (plain, sw) = (Model::load(dst.path(), base).unwrap(), Model::load(dst.path(), on).unwrap());
    assert!(sw.blocks[..2].iter().all(|b| b.ffn.prefill.is_some()), "layers 0 and 1 have MXFP4 copies");
    assert!(
        sw.blocks[2..].iter().all(|b| b.ffn.prefill.is_none()) && plain.blocks.iter().all(|b| b.ffn.prefill.is_none())
    );
    // The copy is the EXL3 expert's effective weight in MXFP4: within E2M1's rounding of each block's scale.
    let (QLinear::Exl3(e), Some(p)) = (&sw.blocks[0].ffn.experts[1].w3, &sw.blocks[0].ffn.prefill) else {
        panic!("an EXL3 expert with a copy")
    };
    let QLinear::Native(c) = &p.experts[1].w3 else { panic!("the copy is native MXFP4") };
    let (want, mut row) = (e.effective(), vec![0.0f32; e.inp]);
    for n in 0..e.out {
        c.dequant_row(n, &mut row);
        for (kb, (got, w)) in row.chunks_exact(32).zip(want[n * e.inp..(n + 1) * e.inp].chunks_exact(32)).enumerate() {
            let step = c.scale_at(n, kb);
            assert!(
                got.iter().zip(w).all(|(a, b)| (a - b).abs() <= step),
                "row {n} block {kb} off by more than its scale"
            );
        }
    }
    let first = |m: &Model, p: &[u32]| greedy(m, p, 0).remove(0);
    let short: Vec<u32> = (0..5).map(|i| 3 + i * 37).collect();
    assert_eq!(first(&plain, &short), first(&sw, &short), "a 5-row prompt keeps the EXL3 experts bit for bit");
    let long: Vec<u32> = (0..12).map(|i| 3 + i * 37).collect();
    let (a, b) = (first(&plain, &long), first(&sw, &long));
    assert!(b.iter().all(|v| v.is_finite()) && a != b, "a 12-row prompt chunk runs the MXFP4 copies");
    let fp8 = Model::load(src.path(), on).err().expect("native experts have no EXL3 to copy");
    assert!(fp8.to_string().contains("not EXL3"), "{fp8}");
}

/// An EXL3 checkpoint keeps no Engram tables (TensorFold's published layout): they load from DeepSeek's original one.
#[test]
fn engram_tables_load_from_the_original_checkpoint_when_the_exl3_one_has_none() {
    // O_DIRECT needs a real filesystem: the build's own directory rather than a possible tmpfs.
    let tmp = |_| tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let [src, dst, bare] = [0, 1, 2].map(tmp);
    write_checkpoint(TinyKind::Tiny, 0, src.path()).unwrap();
    convert(src.path(), dst.path(), Codebook::Mul1, Exl3Mode::Random, 3).unwrap();
    let ck = Checkpoint::open(dst.path()).unwrap();
    let kept: Vec<String> = ck.names().filter(|n| !n.contains("engram.embed")).map(str::to_string).collect();
    assert!(kept.len() + 4 == ck.names().count(), "two layers' tables (weight and scale each) are dropped");
    let tensors: Vec<Tensor> = kept.iter().map(|n| ck.get(n).unwrap()).collect();
    let refs: Vec<(&str, &Tensor)> = kept.iter().map(String::as_str).zip(&tensors).collect();
    tf_core::st::write::write_file(&bare.path().join("model.safetensors"), &refs, None).unwrap();
    for f in ["config.json", "engram_token_map.u32"] {
        std::fs::copy(dst.path().join(f), bare.path().join(f)).unwrap();
    }
    let e = Model::load(bare.path(), Options::default()).err().expect("no tables anywhere").to_string();
    assert!(e.contains("layers.1.engram.embed.weight") && e.contains("--engram-from"), "{e}");
    let prompt: Vec<u32> = (0..40).map(|i| 3 + (i * 7919 % 500) as u32).collect();
    let want = greedy(&Model::load(dst.path(), Options::default()).unwrap(), &prompt, 3);
    for io in [None, Some(IoMode::Direct)] {
        let m = Model::load(
            bare.path(),
            Options { engram_io: io, ..Options::default() }.with_engram_from(Some(src.path())),
        );
        assert_eq!(greedy(&m.unwrap(), &prompt, 3), want, "tables from the original checkpoint, {io:?}");
    }
    // TensorFold's layout: the original shards holding the tables in `<model dir>/engram`, beside the release's full index.
    let folder = bare.path().join("engram");
    std::fs::create_dir(&folder).unwrap();
    for (i, f) in std::fs::read_dir(src.path()).unwrap().map(|e| e.unwrap().path()).enumerate() {
        if f.extension().is_some_and(|x| x == "safetensors") {
            std::fs::copy(&f, folder.join(format!("model-{:05}-of-00048.safetensors", 40 + i))).unwrap();
        }
    }
    let index = r#"{"weight_map": {"embed.weight": "model-00001-of-00048.safetensors"}}"#;
    std::fs::write(folder.join("model.safetensors.index.json"), index).unwrap();
    let m = Model::load(bare.path(), Options::default()).unwrap();
    assert_eq!(greedy(&m, &prompt, 3), want, "tables from <model dir>/engram");
}
