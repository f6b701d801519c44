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
