use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).output().unwrap()
}

fn lean_check(root: &Path, extra: &[&str]) -> Output {
    let root = root.to_str().unwrap();
    xtask(&[&["lean-check", "--root", root], extra].concat())
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn clean_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "src/lib.rs", &"let x = 1;\n".repeat(599));
    dir
}

#[test]
fn clean_tree_passes() {
    let dir = clean_tree();
    let out = lean_check(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("file-too-long: 0 (baseline 0)"));
}

#[test]
fn file_of_601_lines_fails() {
    let dir = clean_tree();
    write(dir.path(), "src/big.rs", &"let x = 1;\n".repeat(601));
    let out = lean_check(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("src/big.rs:600: file-too-long\n"), "{}", stdout(&out));
    assert!(stdout(&out).contains("file-too-long: 1 (baseline 0)"));
}

#[test]
fn two_line_comment_fails() {
    let dir = clean_tree();
    write(dir.path(), "src/talk.rs", "fn a() {}\n// why\n// and why again\n");
    let out = lean_check(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("src/talk.rs:2: multi-line-comment\n"), "{}", stdout(&out));
}

#[test]
fn baseline_in_root_tolerates_known_problems_and_reports_lowering() {
    let dir = clean_tree();
    write(dir.path(), "src/talk.rs", "// why\n// and why again\n");
    write(dir.path(), "lean-baseline.txt", "file-too-long 0\nblock-comment 0\nmulti-line-comment 2\n");
    let out = lean_check(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("multi-line-comment: 1 (baseline 2)"));
    assert!(stdout(&out).contains("can be lowered"));
}

#[test]
fn update_baseline_lowers_but_refuses_to_raise() {
    let dir = clean_tree();
    let baseline = dir.path().join("lean-baseline.txt");
    write(dir.path(), "lean-baseline.txt", "file-too-long 0\nblock-comment 3\nmulti-line-comment 0\n");
    write(dir.path(), "src/a.rs", "/* old */\n");
    let out = lean_check(dir.path(), &["--update-baseline"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(fs::read_to_string(&baseline).unwrap(), "file-too-long 0\nblock-comment 1\nmulti-line-comment 0\n");

    write(dir.path(), "src/b.rs", "/* new */\n");
    let out = lean_check(dir.path(), &["--update-baseline"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("src/b.rs:1: block-comment"), "{}", stdout(&out));
    assert!(stderr(&out).contains("unchanged"), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&baseline).unwrap(), "file-too-long 0\nblock-comment 1\nmulti-line-comment 0\n");
}

#[test]
fn malformed_baseline_fails() {
    let dir = clean_tree();
    write(dir.path(), "lean-baseline.txt", "block-comment many\n");
    let out = lean_check(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("lean-baseline.txt: line 1"), "{}", stderr(&out));
}

#[test]
fn usage_errors_exit_2_and_list_lean_check() {
    let missing = std::env::temp_dir().join("tf-lint-no-such-dir-for-xtask-test");
    let cases: [&[&str]; 5] = [
        &[],
        &["frobnicate"],
        &["lean-check", "--bogus"],
        &["lean-check", "--root"],
        &["lean-check", "--root", missing.to_str().unwrap()],
    ];
    for args in cases {
        let out = xtask(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains("lean-check"), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn help_exits_0() {
    let out = xtask(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("lean-check"));
}

#[test]
fn bench_names_every_kind_it_runs() {
    let out = xtask(&["bench", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    for kind in ["cpu", "gpu", "decode", "exl3", "engram"] {
        assert!(stderr(&out).contains(&format!("`{kind}`")), "{kind}: {}", stderr(&out));
    }
}
