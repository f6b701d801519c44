//! Deterministic synthetic dsv41 checkpoints in the official format (`cargo xtask make-tiny`), and their inventory.

mod configs;
pub mod exl3;
mod init;
pub mod inventory;
pub use tf_core::rng;
pub mod tokenizer;
mod write;

pub use configs::{TinyKind, UnknownTinyKind, engram_rows, small_config, tiny_config};
pub use init::{EMBED_STD, stats};
pub use inventory::{Audit, Param, Store, TensorSpec, audit, expected_tensors, params};
pub use write::{TinyError, Written, deepseek_v4_assets, write_checkpoint};
