//! `cargo xtask gate` end to end on the tiny model: the exact path against itself, a real switch, and declared thresholds.

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

fn gate(dir: &Path, extra: &[&str]) -> (i32, Value, String) {
    let prompts = dir.join("prompts.json");
    let text = |seed: usize, n: usize| {
        (0..n)
            .map(|i| format!("w{} W{}", 3 + (i * 7 + seed) % 200, 4 + (i * 11 + seed) % 200))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let set = json!({"prompts": [
        {"name": "a", "kind": "code", "text": text(1, 40)},
        {"name": "b", "kind": "prose", "text": text(5, 30)},
        {"name": "c", "kind": "chat", "messages": [{"role": "user", "content": text(9, 10)}, {"role": "assistant", "content": text(2, 12)}]},
    ]});
    std::fs::write(&prompts, set.to_string()).unwrap();
    let out = dir.join("receipt.json");
    let model = dir.join("model");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.args(["gate", "--model", model.to_str().unwrap(), "--prompts", prompts.to_str().unwrap()]);
    cmd.args(["--out", out.to_str().unwrap(), "--window", "5"]).args(extra);
    let o = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    let receipt = std::fs::read_to_string(&out).map(|t| serde_json::from_str(&t).unwrap()).unwrap_or(Value::Null);
    let _ = std::fs::remove_file(&out);
    (o.status.code().unwrap_or(-1), receipt, stdout)
}

fn thresholds(dir: &Path, v: Value) -> String {
    let p = dir.join("thresholds.json");
    std::fs::write(&p, v.to_string()).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn the_gate_scores_a_candidate_and_judges_only_on_the_declared_model() {
    let d = tempfile::tempdir().unwrap();
    tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Tiny, 0, &d.path().join("model")).unwrap();
    let undeclared = thresholds(d.path(), json!({"gate_model": null, "max_nll_increase": 0.01}));
    let (code, r, log) = gate(d.path(), &["--candidate", "exact", "--thresholds", &undeclared]);
    assert_eq!(code, 0, "{log}");
    let all = &r["by_kind"]["all"];
    assert!(all["positions"].as_u64().unwrap() > 30, "{r}");
    assert_eq!((all["kl_max"].as_f64(), all["greedy_agreement"].as_f64()), (Some(0.0), Some(1.0)), "exact == exact");
    assert_eq!(all["nll_exact"], all["nll_candidate"]);
    for kind in ["code", "prose", "chat"] {
        assert!(r["by_kind"][kind]["positions"].as_u64().unwrap() > 0, "{kind}: {r}");
    }
    assert!(r["verdict"].as_str().unwrap().starts_with("no verdict"), "{r}");
    let sha = r["model_sha256"].as_str().unwrap().to_string();
    assert_eq!(sha.len(), 64);

    let (code, wide, log) = gate(d.path(), &["--candidate", "sequential-sums", "--thresholds", &undeclared]);
    assert_eq!(code, 0, "{log}");
    let w = &wide["by_kind"]["all"];
    assert!(w["kl_max"].as_f64().unwrap() > 0.0, "the switch reaches the candidate's numerics: {w}");
    assert_eq!(w["nll_exact"], all["nll_exact"], "the exact side is the same model either way");

    let strict = thresholds(d.path(), json!({"gate_model": sha, "max_nll_increase": -1.0}));
    let (code, r, log) = gate(d.path(), &["--candidate", "exact", "--thresholds", &strict]);
    assert_eq!((code, r["verdict"].as_str()), (1, Some("fail")), "{log}");
    assert!(r["failures"][0].as_str().unwrap().starts_with("text rows: NLL increase"), "{r}");
    let fair = thresholds(d.path(), json!({"gate_model": sha, "max_nll_increase": 0.01, "max_kl_mean": 0.0}));
    let (code, r, log) = gate(d.path(), &["--candidate", "exact", "--thresholds", &fair]);
    assert_eq!((code, r["verdict"].as_str()), (0, Some("pass")), "{log}");
    let ids = d.path().join("ids.json");
    let (code, _, log) = gate(d.path(), &["--dump-ids", ids.to_str().unwrap()]);
    assert_eq!(code, 0, "{log}");
    let ids: Value = serde_json::from_str(&std::fs::read_to_string(&ids).unwrap()).unwrap();
    let chat = ids["prompts"].as_array().unwrap().iter().find(|p| p["kind"] == "chat").unwrap();
    assert_eq!(chat["ids"][0], 0, "BOS first: {chat}");
    assert!(chat["ids"].as_array().unwrap().len() > 20, "the chat is encoded, not skipped: {chat}");
    let (code, _, log) = gate(d.path(), &["--candidate", "fast-please"]);
    assert_eq!(code, 2, "an unknown switch is a usage error: {log}");
}

#[test]
fn greedy_rows_follow_the_exact_paths_own_tokens_and_are_judged_when_declared() {
    let d = tempfile::tempdir().unwrap();
    tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Tiny, 0, &d.path().join("model")).unwrap();
    let (_, r, _) = gate(d.path(), &["--candidate", "exact", "--rows", "greedy", "--greedy", "1"]);
    let sha = r["model_sha256"].as_str().unwrap().to_string();
    let greedy = json!({"tokens": 6, "cuts": [0.25, 0.5], "max_kl_mean": 0.0, "min_greedy_agreement": 1.0});
    let declared = thresholds(d.path(), json!({"gate_model": sha, "max_kl_mean": 0.0, "greedy_rows": greedy}));
    let (code, r, log) = gate(d.path(), &["--candidate", "exact", "--thresholds", &declared]);
    assert_eq!((code, r["verdict"].as_str()), (0, Some("pass")), "both declared row sets scored: {log}");
    let g = &r["by_kind_greedy"]["all"];
    let n = g["positions"].as_u64().unwrap();
    assert!(n > 6 && n <= 3 * 2 * 6, "at most 6 tokens at each of 2 cuts of 3 prompts: {g}");
    assert_eq!((g["top1_exact"].as_f64(), g["kl_max"].as_f64()), (Some(1.0), Some(0.0)), "{g}");
    assert!(r["by_kind"]["all"]["positions"].as_u64().unwrap() > 30, "the text rows too: {r}");

    let (code, w, log) = gate(d.path(), &["--candidate", "sequential-sums", "--thresholds", &declared]);
    assert_eq!((code, w["verdict"].as_str()), (1, Some("fail")), "{log}");
    let wg = &w["by_kind_greedy"]["all"];
    assert!(wg["kl_max"].as_f64().unwrap() > 0.0, "the candidate follows the exact tokens with its own numerics: {wg}");
    assert_eq!(wg["positions"], g["positions"], "the exact side generates the same tokens whatever the candidate");
    assert!(w["failures"].as_array().unwrap().iter().any(|f| f.as_str().unwrap().starts_with("greedy rows: KL mean")));

    let (code, r, log) = gate(d.path(), &["--candidate", "exact", "--thresholds", &declared, "--rows", "text"]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(r["verdict"], "no verdict: greedy rows not scored or not declared", "{r}");
    let (_, r, log) = gate(d.path(), &["--candidate", "exact", "--thresholds", &declared, "--greedy", "5"]);
    assert_eq!(r["verdict"], "no verdict: greedy rows not scored or not declared", "other tokens than declared: {log}");
    let (code, _, log) = gate(d.path(), &["--candidate", "exact", "--cuts", "0.5,1.5"]);
    assert_eq!(code, 2, "a cut past the prompt is a usage error: {log}");
}
