//! Shared by the dsv41 integration tests: the tiny and small checkpoints written once per test binary, and greedy argmax.
#![allow(dead_code)]

use std::path::Path;
use std::sync::OnceLock;
use tf_dsv41::tiny::{TinyKind, write_checkpoint};

/// The `kind` checkpoint of seed 0, written on first use.
pub fn dir(kind: TinyKind) -> &'static Path {
    static DIRS: OnceLock<[tempfile::TempDir; 2]> = OnceLock::new();
    let dirs = DIRS.get_or_init(|| {
        [TinyKind::Tiny, TinyKind::Small].map(|k| {
            let d = tempfile::tempdir().unwrap();
            write_checkpoint(k, 0, d.path()).unwrap();
            d
        })
    });
    dirs[usize::from(kind == TinyKind::Small)].path()
}

/// The greedy token: the first index of the largest logit.
pub fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}
