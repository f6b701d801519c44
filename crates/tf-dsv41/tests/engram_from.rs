//! An EXL3 checkpoint keeps no Engram tables (TensorFold's published layout): they load from DeepSeek's original one.

use std::path::Path;
use tf_core::{Checkpoint, Tensor};
use tf_dsv41::tiny::exl3::{Exl3Mode, convert};
use tf_dsv41::tiny::{TinyKind, write_checkpoint};
use tf_dsv41::{Model, Options};
use tf_engram::IoMode;
use tf_exl3::exl3::Codebook;

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
    let from: &'static Path = Box::leak(src.path().to_path_buf().into_boxed_path());
    for io in [None, Some(IoMode::Direct)] {
        let m = Model::load(bare.path(), Options { engram_from: Some(from), engram_io: io, ..Options::default() });
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
