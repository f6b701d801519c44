//! CPU reference ops: deterministic, row-invariant, and fast enough to keep CPU tests short.

pub mod math;
pub mod matmul;
pub mod norm;
pub mod qgemm;

pub use matmul::{matmul_nt, matmul_nt_into};
pub use norm::{argmax, rms_norm_bf16, softmax_in_place};
pub use qgemm::{BlockScaledWeight, Fp8Weight, QBLOCK, QuantActs, qgemm_bf16, qgemm_f32};
