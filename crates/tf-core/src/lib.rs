#![doc = include_str!("../README.md")]

pub mod dtype;
pub mod error;
pub mod formats;
pub mod ops;
pub mod rng;
pub mod st;
pub mod tensor;

pub use dtype::DType;
pub use error::{Error, Result};
pub use half::{bf16, f16};
pub use st::{Checkpoint, SafetensorsFile};
pub use tensor::Tensor;

/// TensorFold's cache folder (synthetic models, compiled kernels): `$TF_CACHE_DIR`, else `~/.cache/tensorfold`.
pub fn cache_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    std::env::var_os("TF_CACHE_DIR").map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("HOME")
            .map_or_else(|| PathBuf::from(".cache"), |h| PathBuf::from(h).join(".cache"))
            .join("tensorfold")
    })
}
