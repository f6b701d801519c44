//! The dsv41 forward on one NVIDIA GPU: our kernels (`kernels/*.cu`), their launchers, and the model built on them.

mod attn;
pub mod dspark;
mod forward;
mod index;
pub mod kernels;
pub mod lane;
pub mod layer;
pub mod model;
mod moe;
mod moe_ep;
pub mod ops;
#[cfg(feature = "testkit")]
mod probe;
mod rewind;
mod split;
#[cfg(feature = "testkit")]
pub mod synth;
pub mod weights;

pub use lane::GpuLane;
pub use model::{GpuModel, open_gpu};
pub use moe_ep::GEp;
#[cfg(feature = "testkit")]
pub use probe::ProbeRow;
#[cfg(feature = "testkit")]
pub use synth::{flash_config, flash_config_dspark};
