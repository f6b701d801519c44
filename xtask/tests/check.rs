//! `cargo xtask check` against our own server on the tiny model: the sweep, the invariances and divergence, passing and failing.

mod common;

use common::{serve, serve_config, serve_seed};
use serde_json::Value;
use std::process::Command;

/// Runs `cargo xtask check ARGS --out FILE`; its exit code and receipt.
fn check(args: &[&str]) -> (Option<i32>, Value) {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("check.json");
    let o = Command::new(env!("CARGO_BIN_EXE_xtask")).arg("check").args(args).arg("--out").arg(&out).output().unwrap();
    let log = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    eprintln!("{log}");
    let receipt = std::fs::read_to_string(&out).map_or(Value::Null, |t| serde_json::from_str(&t).unwrap());
    (o.status.code(), receipt)
}

fn context(base: &str) -> u64 {
    let text = ureq::get(&format!("{base}/v1/models")).call().unwrap().body_mut().read_to_string().unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["data"][0]["max_model_len"].as_u64().expect("our /v1/models says max_model_len")
}

#[test]
fn sweep_passes_inside_the_context_and_lists_every_length_past_it() {
    let d = tempfile::tempdir().unwrap();
    let base = serve(&d.path().join("tiny-model"));
    let (code, r) = check(&["sweep", "--url", &base, "--max-len", "70", "--lengths", "70"]);
    assert_eq!((code, r["pass"].as_bool(), r["lengths"].as_u64()), (Some(0), Some(true), Some(69)), "{r}");
    assert_eq!((r["first"].as_u64(), r["last"].as_u64()), (Some(1), Some(69)), "prompt + 1 reply token fit in 70");
    let ctx = context(&base);
    let (code, r) = check(&["sweep", "--url", &base, "--max-len", &ctx.to_string(), "--lengths", "3"]);
    assert_eq!((code, r["last"].as_u64()), (Some(0), Some(ctx - 1)), "the longest prompt the context allows: {r}");
    let past = ctx + 5;
    let (code, r) = check(&["sweep", "--url", &base, "--max-len", &past.to_string(), "--lengths", "4"]);
    assert_eq!((code, r["pass"].as_bool()), (Some(1), Some(false)), "{r}");
    let failed: Vec<u64> = r["failures"].as_array().unwrap().iter().map(|f| f["length"].as_u64().unwrap()).collect();
    assert_eq!(failed, vec![past - 1], "only the length past the context fails: {r}");
    assert!(r["failures"][0]["error"].as_str().unwrap().contains("HTTP 400"), "{r}");
}

#[test]
fn invariance_holds_on_our_server_and_resumes_from_the_cache() {
    // Windows of 3 drafts on every step, so drafted == plain is compared where drafts really ran.
    let limits = tf_server::lanes::Limits { draft_len: Some(3), ..Default::default() };
    let base = serve_config(tf_server::http::serve::ServeConfig { limits, ..Default::default() });
    let args = ["invariance", "--url", &base, "--prompts", "4", "--prompt-tokens", "48", "--max-tokens", "6"];
    let (code, r) = check(&args);
    assert_eq!((code, r["pass"].as_bool(), r["requests"].as_u64()), (Some(0), Some(true), Some(8)), "{r}");
    assert!(r["resumed_cached_tokens"].as_u64().unwrap() > 0, "the resumed run really came from the cache: {r}");
    let metrics = ureq::get(&format!("{base}/metrics")).call().unwrap().body_mut().read_to_string().unwrap();
    let windows = metrics.lines().find_map(|l| l.strip_prefix("tf:spec_decode_num_drafts_total ")).unwrap();
    assert!(windows.parse::<u64>().unwrap() > 0, "the server drafted: {metrics}");
    assert_eq!(r["drafted_vs_plain"], true, "{r}");
}

#[test]
fn divergence_finds_none_against_the_same_model_and_some_against_another() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (serve(&d.path().join("tiny-model")), serve_seed(&d.path().join("tiny-other"), 1));
    let (code, r) = check(&["divergence", "--url", &a, "--reference", &a, "--max-tokens", "8"]);
    assert_eq!((code, r["identical"].as_u64()), (Some(0), Some(12)), "{r}");
    let (code, r) = check(&["divergence", "--url", &a, "--reference", &b, "--max-tokens", "8"]);
    assert_eq!(code, Some(0), "{r}");
    assert!(r["identical"].as_u64().unwrap() < 12, "other weights part somewhere: {r}");
    let firsts = r["prompts"].as_array().unwrap().iter().filter_map(|p| p["first_divergence"].as_u64());
    assert!(firsts.clone().count() > 0 && firsts.into_iter().all(|f| f < 8), "{r}");
}

#[test]
fn a_bad_check_name_or_flag_exits_2() {
    for args in [&["sweeep"][..], &["sweep", "--lengths", "many"]] {
        let o = Command::new(env!("CARGO_BIN_EXE_xtask")).arg("check").args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let o = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["check", "--help"]).output().unwrap();
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("needle"), "check --help prints usage");
}

#[test]
fn needle_reports_every_depth_and_length_and_fails_below_its_rate() {
    let d = tempfile::tempdir().unwrap();
    let base = serve(&d.path().join("tiny-model"));
    let (code, r) = check(&["needle", "--url", &base, "--lengths", "2"]);
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 10, "2 lengths × 5 depths: {r}");
    let depths: Vec<u64> = cells.iter().take(5).map(|c| c["depth_pct"].as_u64().unwrap()).collect();
    assert_eq!(depths, [0, 25, 50, 75, 100]);
    let ctx = context(&base);
    assert!(cells.iter().all(|c| c["error"].is_null() && c["prompt_tokens"].as_u64().unwrap() < ctx), "{r}");
    let found = r["found"].as_u64().unwrap();
    assert_eq!(code, Some(if found == 10 { 0 } else { 1 }), "a random model misses, and the check says so: {r}");
    let (code, r) = check(&["needle", "--url", &base, "--lengths", "1", "--min-rate", "0"]);
    assert_eq!((code, r["pass"].as_bool()), (Some(0), Some(true)), "{r}");
}

#[test]
fn nll_against_the_same_model_is_equal_and_against_other_weights_fails() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (serve(&d.path().join("tiny-model")), serve_seed(&d.path().join("tiny-other"), 1));
    let args = ["nll", "--url", &a, "--prompts", "1", "--max-tokens", "8", "--reference"];
    let (code, r) = check(&[&args[..], &[a.as_str()]].concat());
    assert_eq!((code, r["pass"].as_bool()), (Some(0), Some(true)), "{r}");
    let bucket = &r["by_bucket"]["128"];
    assert_eq!(bucket["tokens"].as_f64(), Some(16.0), "2 kinds × 1 prompt × 8 tokens: {r}");
    assert_eq!((bucket["nll"].as_f64(), bucket["top1"].as_f64()), (bucket["reference_nll"].as_f64(), Some(1.0)), "{r}");
    let (code, r) = check(&[&args[..], &[b.as_str()]].concat());
    assert_eq!((code, r["pass"].as_bool()), (Some(1), Some(false)), "{r}");
    assert!(r["by_bucket"]["128"]["top1"].as_f64().unwrap() < 1.0, "{r}");
}
