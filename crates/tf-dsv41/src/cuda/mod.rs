//! The dsv41 forward on one NVIDIA GPU: our kernels (`kernels/*.cu`), their launchers, and the model built on them.

pub mod kernels;
pub mod ops;
