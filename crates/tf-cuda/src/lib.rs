#![doc = include_str!("../README.md")]

pub mod arch;
pub mod cache;

pub use arch::Arch;
pub use cache::{KernelSpec, cache_key, cache_path};
