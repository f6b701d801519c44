//! The compact gate model expands into the official layout (used rows placed, the rest zero or the head's shared row, tied heads), bad files refused.

use std::collections::HashMap;
use std::path::Path;

use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};
use sha2::{Digest, Sha256};
use tf_dsv41::gate_model::{GateModelError, ensure, expand};

const VOCAB: usize = 12;
const USED: [u32; 4] = [0, 1, 2, 7];

fn rows(n: usize, cols: usize, base: u16) -> Vec<u8> {
    (0..n * cols).flat_map(|i| (base + i as u16).to_le_bytes()).collect()
}

fn write_compact(dir: &Path, used: &[u32], tied: bool) -> String {
    let ids: Vec<u8> = used.iter().flat_map(|i| i.to_le_bytes()).collect();
    let (embed, head, rest, markov, other) =
        (rows(4, 3, 100), rows(4, 3, 500), rows(1, 3, 900), rows(4, 2, 40), rows(2, 2, 7));
    let mut t = vec![
        ("used_ids", TensorView::new(Dtype::U32, vec![used.len()], &ids).unwrap()),
        ("embed.weight", TensorView::new(Dtype::BF16, vec![4, 3], &embed).unwrap()),
        ("head.weight.rest", TensorView::new(Dtype::BF16, vec![1, 3], &rest).unwrap()),
        ("mtp.2.markov_head.embed.weight", TensorView::new(Dtype::BF16, vec![4, 2], &markov).unwrap()),
        ("layers.0.attn.wq_a.weight", TensorView::new(Dtype::BF16, vec![2, 2], &other).unwrap()),
    ];
    if !tied {
        t.push(("head.weight", TensorView::new(Dtype::BF16, vec![4, 3], &head).unwrap()));
    }
    let meta = HashMap::from([
        ("format".to_string(), "tf-gate-compact-1".to_string()),
        ("vocab".to_string(), VOCAB.to_string()),
        ("tied_head".to_string(), if tied { "embed.weight".into() } else { String::new() }),
    ]);
    let bytes = safetensors::serialize(t, Some(meta)).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("model.safetensors"), &bytes).unwrap();
    let cfg = tf_dsv41::tiny::TinyKind::Tiny.hf_json();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn row(data: &[u8], r: usize, cols: usize) -> Vec<u16> {
    data[r * cols * 2..(r + 1) * cols * 2].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()
}

#[test]
fn expansion_places_used_rows_and_fills_the_rest() {
    for tied in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let (src, out) = (tmp.path().join("c"), tmp.path().join("x"));
        let sha = write_compact(&src, &USED, tied);
        let shard_sha = expand(&src, &out, Some(&sha)).unwrap();
        let raw = std::fs::read(out.join("model-00001-of-00001.safetensors")).unwrap();
        let hex: String = Sha256::digest(&raw).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, shard_sha);
        let st = SafeTensors::deserialize(&raw).unwrap();
        let mut names = st.names();
        names.sort();
        assert_eq!(
            names,
            ["embed.weight", "head.weight", "layers.0.attn.wq_a.weight", "mtp.2.markov_head.embed.weight"]
        );
        let (embed, head, markov) = (
            st.tensor("embed.weight").unwrap(),
            st.tensor("head.weight").unwrap(),
            st.tensor("mtp.2.markov_head.embed.weight").unwrap(),
        );
        assert_eq!(embed.shape(), [VOCAB, 3]);
        assert_eq!(markov.shape(), [VOCAB, 2]);
        for id in 0..VOCAB {
            let k = USED.iter().position(|&u| u as usize == id);
            let e = row(embed.data(), id, 3);
            let h = row(head.data(), id, 3);
            match k {
                Some(k) => {
                    assert_eq!(e, row(&rows(4, 3, 100), k, 3), "embed row {id}");
                    let want = if tied { &rows(4, 3, 100) } else { &rows(4, 3, 500) };
                    assert_eq!(h, row(want, k, 3), "head row {id}");
                    assert_eq!(row(markov.data(), id, 2), row(&rows(4, 2, 40), k, 2));
                }
                None => {
                    assert_eq!(e, [0, 0, 0], "unused embed row {id} is zero");
                    assert_eq!(h, [900, 901, 902], "unused head row {id} is the shared row");
                    assert_eq!(row(markov.data(), id, 2), [0, 0]);
                }
            }
        }
        assert_eq!(st.tensor("layers.0.attn.wq_a.weight").unwrap().data(), rows(2, 2, 7).as_slice());
        for f in [
            "config.json",
            "inference/config.json",
            "tokenizer.json",
            "engram_token_map.u32",
            "model.safetensors.index.json",
        ] {
            assert!(out.join(f).is_file(), "{f}");
        }
        let index: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("model.safetensors.index.json")).unwrap()).unwrap();
        assert_eq!(index["weight_map"].as_object().unwrap().len(), 4);
    }
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("c");
    write_compact(&src, &USED, true);
    let e = expand(&src, &tmp.path().join("x"), Some("00")).unwrap_err();
    assert!(matches!(e, GateModelError::Checksum { .. }), "{e}");
    assert!(e.to_string().contains("model.safetensors"), "{e}");
    write_compact(&src, &[0, 2, 1, 7], true);
    let e = expand(&src, &tmp.path().join("y"), None).unwrap_err();
    assert!(e.to_string().contains("increasing"), "{e}");
    write_compact(&src, &[0, 1, 2, 12], true);
    assert!(expand(&src, &tmp.path().join("z"), None).is_err(), "an id past the vocab");
}

#[test]
fn ensure_checks_both_hashes_and_reuses_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, cache) = (tmp.path().join("assets"), tmp.path().join("cache"));
    let sha = write_compact(&src, &USED, true);
    let probe = expand(&src, &tmp.path().join("probe"), None).unwrap();
    let manifest = |compact: &str, expanded: &str| {
        let m = serde_json::json!({"compact_sha256": compact, "expanded_sha256": expanded});
        std::fs::write(src.join("gate-model.json"), m.to_string()).unwrap();
    };
    manifest(&sha, &"f".repeat(64));
    assert!(matches!(ensure(&src, &cache).unwrap_err(), GateModelError::Checksum { .. }));
    manifest(&sha, &probe);
    let dir = ensure(&src, &cache).unwrap();
    assert!(dir.ends_with(format!("gate-model-{}", &probe[..12])));
    std::fs::remove_file(src.join("model.safetensors")).unwrap();
    assert_eq!(ensure(&src, &cache).unwrap(), dir, "a second call reads nothing but the manifest");
}
