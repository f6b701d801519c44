//! `cargo xtask soak` against our own server on the default model: every kind of request runs, nothing fails or goes missing.

mod common;

use common::serve_default;
use serde_json::Value;
use std::process::Command;

#[test]
fn a_short_soak_runs_every_kind_and_loses_nothing() {
    let d = tempfile::tempdir().unwrap();
    let base = serve_default();
    let out = d.path().join("soak.json");
    let o = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["soak", "--url", &base, "--duration-s", "8", "--concurrency", "3", "--sample-s", "0.25"])
        .args(["--max-tokens", "6", "--long-tokens", "300", "--max-rss-growth", "0.5", "--seed", "7"])
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    eprintln!("{log}");
    assert!(o.status.success(), "{log}");
    assert!(log.contains("| kind | sent | ok | refused | cancelled | errors | lost |"), "{log}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!((r["pass"].as_bool(), r["model"].as_str()), (Some(true), Some("tensorfold-gate")), "{r}");
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap();
    for (kind, v) in r["by_kind"].as_object().unwrap() {
        assert!(n(v, "sent") > 0, "{kind} never ran: {v}");
        let parts = n(v, "ok") + n(v, "refused") + n(v, "cancelled") + n(v, "errors") + n(v, "lost");
        assert_eq!(parts, n(v, "sent"), "{kind}: every request is counted once: {v}");
        assert_eq!((n(v, "errors"), n(v, "lost")), (0, 0), "{kind}: {v}");
        let want_cancelled = if kind == "cancelled_stream" { n(v, "sent") } else { 0 };
        assert_eq!(n(v, "cancelled"), want_cancelled, "{kind}: only hang-ups count as cancelled: {v}");
    }
    assert_eq!(r["by_kind"].as_object().unwrap().len(), 6);
    assert_eq!((r["health"]["not_200"].as_u64(), r["lanes_drained"].as_bool()), (Some(0), Some(true)), "{r}");
    let rss = r["memory"]["rss_bytes"].as_array().unwrap();
    assert!(rss.len() >= 8 && rss.iter().all(|s| s[1].as_u64().unwrap() > 1 << 20), "RSS from /metrics: {rss:?}");
    assert_eq!(r["memory"]["flat"].as_bool(), Some(true), "{}", r["memory"]["growth"]);
}

#[test]
fn a_bad_command_line_exits_2_naming_the_flag() {
    let o = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["soak", "--duration-s", "soon"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--duration-s"), "{err}");
}
