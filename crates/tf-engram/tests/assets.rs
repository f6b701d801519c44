//! The shipped DeepSeek-V4 assets: tokenizer vocab, token map classes and the files' recorded hashes.

use sha2::{Digest, Sha256};
use std::path::PathBuf;
use tf_engram::{DEEPSEEK_V4_CLASSES, DEEPSEEK_V4_TOKEN_MAP, DEEPSEEK_V4_VOCAB, TokenMap};

fn asset(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../assets/deepseek-v4").join(name)
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn token_map_has_99092_classes_and_pad_is_class_2() {
    let map = TokenMap::deepseek_v4().unwrap();
    assert_eq!(map.len(), 129_280);
    assert_eq!(map.classes(), 99_092);
    assert_eq!(map.get(2), Some(2), "pad = map[engram_pad_id = 2]");
    assert_eq!(TokenMap::open(asset("token_map.u32")).unwrap(), map);
}

#[test]
fn token_map_bytes_match_the_recorded_sha256() {
    let want = "c60a86322ec17b4142bfef3c57a8d81fb428550cdf487f88a4320cb59fe46481";
    assert_eq!(sha256_hex(DEEPSEEK_V4_TOKEN_MAP), want);
    let readme = std::fs::read_to_string(asset("README.md")).unwrap();
    assert!(readme.contains(want), "assets README records the token map hash");
}

#[test]
fn tokenizer_has_129280_ids_including_added_tokens() {
    let bytes = std::fs::read(asset("tokenizer.json")).unwrap();
    let readme = std::fs::read_to_string(asset("README.md")).unwrap();
    assert!(readme.contains(&sha256_hex(&bytes)), "assets README records the tokenizer hash");
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let vocab = json["model"]["vocab"].as_object().unwrap();
    let added = json["added_tokens"].as_array().unwrap();
    let mut ids: Vec<u64> = vocab.values().chain(added.iter().map(|t| &t["id"])).map(|v| v.as_u64().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), DEEPSEEK_V4_VOCAB);
    assert_eq!(ids.last(), Some(&(DEEPSEEK_V4_VOCAB as u64 - 1)), "ids are dense");
    assert_eq!(DEEPSEEK_V4_CLASSES, 99_092);
}

#[test]
fn token_map_rejects_out_of_order_classes_and_ragged_bytes() {
    assert_eq!(TokenMap::new(vec![0, 1, 0, 2, 1]).unwrap().classes(), 3);
    let err = TokenMap::new(vec![0, 2, 1]).unwrap_err().to_string();
    assert!(err.contains("token 1 maps to class 2"), "{err}");
    assert!(TokenMap::from_le_bytes(&[0, 0, 0]).is_err());
    let missing = TokenMap::open("/nonexistent/token_map.u32").unwrap_err().to_string();
    assert!(missing.contains("/nonexistent/token_map.u32"), "{missing}");
}
