use std::fs;
use std::path::Path;

use tf_lint::{Problem, check_tree};

const BAD: &str = "// one\n// two\n";

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn shown(problems: &[Problem]) -> Vec<String> {
    problems.iter().map(Problem::to_string).collect()
}

#[test]
fn walks_source_files_with_relative_sorted_paths() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "src/z.rs", BAD);
    write(root, "src/a.rs", "fn a() {}\n/* x */\n");
    write(root, "kernels/gemm.cu", BAD);
    write(root, "kernels/gemm.cuh", BAD);
    write(root, "build.rs", BAD);
    write(root, "notes.md", BAD);
    write(root, "src/data.txt", BAD);
    let expected = [
        "build.rs:1: multi-line-comment",
        "kernels/gemm.cu:1: multi-line-comment",
        "kernels/gemm.cuh:1: multi-line-comment",
        "src/a.rs:2: block-comment",
        "src/z.rs:1: multi-line-comment",
    ];
    assert_eq!(shown(&check_tree(root).unwrap()), expected);
}

#[test]
fn skips_build_output_and_hidden_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "target/debug/build/out.rs", BAD);
    write(root, ".git/hooks/x.rs", BAD);
    write(root, "crates/a/.hidden/x.rs", BAD);
    write(root, "crates/a/fuzz/target/x.rs", BAD);
    write(root, "fuzz/target/x.rs", BAD);
    write(root, "crates/b/target/CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55\n");
    write(root, "crates/b/target/x.rs", BAD);
    write(root, "crates/a/src/lib.rs", "fn ok() {}\n");
    assert_eq!(check_tree(root).unwrap(), []);
}

#[test]
fn source_dir_named_target_is_still_checked() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "crates/spec/src/target/mod.rs", BAD);
    assert_eq!(shown(&check_tree(dir.path()).unwrap()), ["crates/spec/src/target/mod.rs:1: multi-line-comment"]);
}

#[test]
fn missing_root_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    assert!(check_tree(&dir.path().join("absent")).is_err());
}
