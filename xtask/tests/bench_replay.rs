//! `cargo xtask bench replay` against our own server on the tiny model: every turn of every copy, and the prompt cache at work.

mod common;

use common::serve;
use serde_json::{Value, json};
use std::process::Command;

/// A three-turn session whose history grows by a tool call and its result each turn.
fn session() -> String {
    let mut msgs = vec![json!({"role": "user", "content": "Check the build of crate alpha and report. ".repeat(8)})];
    let mut lines = Vec::new();
    for i in 0..3 {
        lines.push(json!({"messages": msgs.clone(), "max_tokens": 4}).to_string());
        let id = format!("call_{i:016x}");
        msgs.push(json!({"role": "assistant", "content": "", "tool_calls": [{"id": id, "type": "function",
            "function": {"name": "build", "arguments": "{\"crate\": \"alpha\"}"}}]}));
        msgs.push(json!({"role": "tool", "tool_call_id": id, "content": format!("build {i}: ok, 3 warnings")}));
    }
    lines.join("\n") + "\n"
}

#[test]
fn replay_runs_every_turn_of_every_copy_and_hits_the_cache() {
    let d = tempfile::tempdir().unwrap();
    let base = serve(&d.path().join("tiny-model"));
    let (file, out) = (d.path().join("session.jsonl"), d.path().join("replay.json"));
    std::fs::write(&file, session()).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench", "replay", "--session", file.to_str().unwrap(), "--url", &base, "--concurrency", "1,2"])
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!((r["turns"].as_u64(), r["errors"].as_u64()), (Some(3), Some(0)), "{r}");
    for (cell, c) in r["cells"].as_array().unwrap().iter().zip([1u64, 2]) {
        assert_eq!((cell["concurrency"].as_u64(), cell["requests"].as_u64()), (Some(c), Some(3 * c)), "{cell}");
        let raw = cell["raw"].as_array().unwrap();
        // The tiny model's word-level tokenizer maps every copy's numeric tag to one unknown id, so only the first run is cold.
        if c == 1 {
            assert_eq!(
                raw[0]["cached_tokens"].as_u64(),
                Some(0),
                "the first turn of a fresh server starts cold: {cell}"
            );
        }
        let later: u64 = raw.iter().filter(|r| r["turn"] != 0).map(|r| r["cached_tokens"].as_u64().unwrap()).sum();
        assert!(later > 0 && cell["cache_hit_rate"].as_f64().unwrap() > 0.0, "later turns resume: {cell}");
    }
}

#[test]
fn a_session_line_without_messages_is_named() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("bad.jsonl");
    std::fs::write(&file, "{\"messages\": []}\n{\"prompt\": \"x\"}\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench", "replay", "--session", file.to_str().unwrap(), "--url", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("bad.jsonl:2: no `messages` list"), "{err}");
}
