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
