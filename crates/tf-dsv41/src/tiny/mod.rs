//! Deterministic synthetic dsv41 checkpoints in the official format (`cargo xtask make-tiny`): test support, behind `testkit`.

mod configs;
pub mod exl3;
mod init;
pub use tf_core::rng;
pub mod tokenizer;
mod write;

pub use configs::{TinyKind, UnknownTinyKind, engram_rows, small_config, tiny_config};
pub use init::{EMBED_STD, stats};
pub use write::{TinyError, Written, write_checkpoint};
