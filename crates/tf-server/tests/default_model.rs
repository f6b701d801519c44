//! With no `--model`, a checkout without the shipped gate model is an error naming it, never a synthetic stand-in.

use tf_server::http::serve::default_model_in;

#[test]
fn missing_gate_model_names_its_path_and_the_way_out() {
    let (assets, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let err = default_model_in(assets.path(), cache.path()).unwrap_err().to_string();
    assert!(err.contains(assets.path().join("gate-model.json").to_str().unwrap()), "{err}");
    assert!(err.contains("--model DIR") && err.contains("assets/gate-model"), "{err}");
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0, "nothing is written to the cache");
}

#[test]
fn model_dir_expands_the_compact_gate_model_and_passes_other_dirs_through() {
    let assets = tf_dsv41::gate_model::gate_model_assets();
    let dir = tf_server::http::serve::model_dir(Some(&assets)).unwrap();
    assert_ne!(dir, assets, "the compact form is not loadable as is");
    for f in ["model.safetensors.index.json", "tokenizer.json", "inference/config.json"] {
        assert!(dir.join(f).is_file(), "{}: no {f}", dir.display());
    }
    let other = tempfile::tempdir().unwrap();
    assert_eq!(tf_server::http::serve::model_dir(Some(other.path())).unwrap(), other.path());
}
