//! Safetensors loading through `safetensors` and `memmap2`: zero-copy, sharded, with errors that name the tensor.

mod checkpoint;
mod diagnose;
mod file;
pub mod write;

pub use checkpoint::{Checkpoint, INDEX_FILE};
pub use file::{SafetensorsFile, TensorEntry, parse_header};
