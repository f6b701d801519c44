//! `tf plan` on the released config and on a checkpoint's: heads per rank, what fits, and refused flags.

use std::process::{Command, Output};
use tf_dsv41::tiny::{TinyKind, write_checkpoint};

fn tf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tf")).args(args).output().expect("tf runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = tf(&[&["plan", "--json"], args].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_released_config_splits_heads_in_groups_and_needs_several_gpus() {
    let tp3 = json(&["--tp", "3", "--gpu-mem", "141"]);
    assert_eq!(tp3["heads"], serde_json::json!([16, 24, 24]));
    let one = json(&["--gpu-mem", "141"]);
    assert_eq!(one["max_context"], serde_json::json!([0]), "one H200 cannot hold ~300 GB");
    let tp8 = json(&["--tp", "8", "--gpu-mem", "141"]);
    let w8 = tp8["weights_bytes"][0].as_u64().unwrap();
    let w1 = one["weights_bytes"][0].as_u64().unwrap();
    assert!(w8 * 8 > w1 && w8 * 7 < w1, "TP8 holds about an eighth each: {w8} of {w1}");
    let exl3 = json(&["--tp", "2", "--gpu-mem", "128", "--weights", "exl3", "--bpw", "2.9"]);
    assert!(exl3["max_context"][0].as_u64().unwrap() > 0, "TP2 on two GB10 with EXL3 fits, as the thread ran it");
    let text = String::from_utf8(tf(&["plan", "--tp", "2", "--gpu-mem", "80"]).stdout).unwrap();
    assert!(text.contains("does not fit"), "{text}");
}

#[test]
fn a_checkpoints_config_is_planned_and_bad_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_checkpoint(TinyKind::Tiny, 0, dir.path()).unwrap();
    let tiny = json(&["--model", dir.path().to_str().unwrap(), "--tp", "2", "--gpu-mem", "8"]);
    assert_eq!(tiny["heads"], serde_json::json!([2, 2]));
    assert!(tiny["max_context"][0].as_u64().unwrap() > 0);
    for (args, says) in [
        (vec!["plan", "--tp", "0", "--gpu-mem", "80"], "--tp"),
        (vec!["plan", "--tp", "2"], "--gpu-mem"),
        (vec!["plan", "--gpu-mem", "80", "--weights", "int4"], "--weights"),
        (vec!["plan", "--gpu-mem", "-1"], "--gpu-mem"),
        (vec!["plan", "--gpu-mem", "80", "--model", "/no/such/dir"], "/no/such/dir"),
    ] {
        let out = tf(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
    }
}
