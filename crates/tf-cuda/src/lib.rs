//! TensorFold-rs CUDA backend. This first piece names GPU targets and keys the on-disk kernel cache.

pub mod arch;
pub mod cache;

pub use arch::Arch;
pub use cache::{KernelSpec, cache_key, cache_path};
