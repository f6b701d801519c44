#![doc = include_str!("../README.md")]

pub mod arch;
pub mod blas;
pub mod cache;
pub mod compile;
pub mod error;
pub mod gpu;
pub mod graph;
pub mod kernels;
pub mod launch;
pub mod nvrtc;
pub mod ops;
pub mod pinned;
pub mod pool;
pub mod report;
pub mod timing;

pub use arch::{Arch, UnknownArch};
pub use blas::Blas;
pub use cache::{KernelSpec, cache_key, cache_path, default_cache_dir};
pub use compile::{Cached, Compiled};
pub use error::Error;
pub use gpu::{Gpu, GpuInfo, default_nvrtc_dirs};
pub use graph::GraphStats;
pub use kernels::KernelSource;
pub use nvrtc::Nvrtc;
pub use pool::{DevicePool, PoolBuf, PoolStats, size_class};
