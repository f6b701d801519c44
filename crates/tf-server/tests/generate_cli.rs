//! The real `tf` binary on a synthetic tiny checkpoint: text, rates, determinism, chunking and errors.

use std::path::Path;
use std::process::{Command, Output};
use tempfile::TempDir;
use tf_dsv41::tiny::{TinyKind, write_checkpoint};

/// Longer than the tiny model's 16-row window, so bounded replay and chunk edges both matter.
const PROMPT: &str = "w10 W11 w12 w13 W14 w15 w16 w17 W18 w19 w20 w21 w22 W23 w24 w25 w26 w27 w28 W29 w30";

fn tiny() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_checkpoint(TinyKind::Tiny, 0, dir.path()).unwrap();
    dir
}

fn tf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tf")).args(args).output().expect("tf runs")
}

fn generate(model: &Path, extra: &[&str]) -> Output {
    let model = model.to_str().unwrap();
    tf(&[&["generate", "--model", model, "--prompt", PROMPT, "--max-tokens", "12"], extra].concat())
}

fn ok_stdout(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tf failed ({:?}): {err}", out.status);
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn generate_streams_text_and_reports_rates() {
    let dir = tiny();
    let out = generate(dir.path(), &[]);
    let text = ok_stdout(&out);
    assert!(!text.trim().is_empty(), "no text generated");
    assert!(text.starts_with(' '), "the word-level decoder joins the continuation with a space: {text:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("prompt 22 tokens in "), "BOS plus 21 words: {err}");
    assert!(err.contains(" tokens in ") && err.ends_with("tok/s)\n"), "{err}");
}

#[test]
fn greedy_output_is_deterministic() {
    let dir = tiny();
    let a = ok_stdout(&generate(dir.path(), &[]));
    let b = ok_stdout(&generate(dir.path(), &[]));
    assert_eq!(a, b);
}

#[test]
fn chunked_prefill_gives_the_same_text() {
    let dir = tiny();
    let whole = ok_stdout(&generate(dir.path(), &[]));
    assert_eq!(ok_stdout(&generate(dir.path(), &["--chunk", "7"])), whole);
    let plain = ok_stdout(&generate(dir.path(), &["--no-replay"]));
    assert_eq!(ok_stdout(&generate(dir.path(), &["--no-replay", "--chunk=7"])), plain);
}

#[test]
fn a_missing_model_dir_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-model");
    let out = generate(&missing, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_directory_without_a_checkpoint_fails_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = generate(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("tokenizer.json"), "{err}");
    std::fs::copy(tiny().path().join("tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    let out = generate(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains(dir.path().to_str().unwrap()));
}

#[test]
fn usage_errors_exit_2() {
    let out = tf(&["generate", "--model", "/x", "--prompt", "p", "--temperature", "0.7"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("'--temperature'"));
    assert_eq!(tf(&["generate", "--model", "/x"]).status.code(), Some(2), "--prompt is required");
    assert_eq!(tf(&["frobnicate"]).status.code(), Some(2));
    assert!(tf(&["generate", "--help"]).status.success());
    let help = tf(&["serve", "--help"]);
    let help = String::from_utf8(help.stdout).unwrap();
    for flag in ["--model", "--device", "--prefix-cache-tokens", "--prefill-mxfp4-min-rows", "--engram-from"] {
        assert!(help.contains(flag), "serve --help names {flag}");
    }
    assert!(tf(&["serve", "--port=0", "--max-lanes=0x"]).status.code() == Some(2), "--flag=value and bad counts");
    let graphs_on_cpu = tf(&["serve", "--cuda-graphs", "--port", "0"]);
    assert_eq!(graphs_on_cpu.status.code(), Some(2));
    assert!(String::from_utf8(graphs_on_cpu.stderr).unwrap().contains("--cuda-graphs needs --device cuda"));
    let bad_kernels = tf(&["serve", "--exl3-kernels", "turbo", "--port", "0"]);
    assert_eq!(bad_kernels.status.code(), Some(2));
    assert!(String::from_utf8(bad_kernels.stderr).unwrap().contains("invalid value 'turbo' for '--exl3-kernels"));
    for (args, says) in [
        (&["serve", "--exl3-prompt", "gemm", "--port", "0"][..], "--exl3-prompt gemm needs --device cuda"),
        (&["serve", "--exl3-prompt", "fast", "--port", "0"][..], "invalid value 'fast' for '--exl3-prompt"),
        (
            &["serve", "--exl3-prompt-min-rows", "64", "--port", "0"][..],
            "--exl3-prompt-min-rows needs --exl3-prompt gemm",
        ),
        (&["serve", "--exl3-prompt", "gemm", "--exl3-prompt-min-rows", "1"][..], "must be at least 2"),
        (
            &["serve", "--tp", "2", "--tp-addr", "127.0.0.1:9", "--tp-transport", "nccl"][..],
            "--tp-transport nccl needs --tp-addr and --device cuda:N",
        ),
        (
            &["serve", "--tp", "2", "--tp-transport", "nccl", "--device", "cuda"][..],
            "--tp-transport nccl needs --tp-addr",
        ),
        (&["serve", "--wide-sums", "--sequential-sums"][..], "contradict each other"),
    ] {
        let out = tf(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8(out.stderr).unwrap().contains(says), "{args:?} should say {says}");
    }
    let cache_mapped = tf(&["serve", "--engram-cache-rows", "1000", "--port", "0"]);
    assert_eq!(cache_mapped.status.code(), Some(2));
    assert!(String::from_utf8(cache_mapped.stderr).unwrap().contains("--engram-cache-rows needs --engram-io"));
}

#[test]
fn inspect_still_lists_the_checkpoint() {
    let dir = tiny();
    let out = tf(&["inspect", dir.path().to_str().unwrap(), "--filter", "embed"]);
    assert!(ok_stdout(&out).contains("embed.weight"));
}
