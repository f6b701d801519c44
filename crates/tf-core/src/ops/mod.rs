//! CPU reference ops: deterministic, row-invariant, and fast enough to keep CPU tests short.

pub mod math;
pub mod matmul;
pub mod norm;
pub mod qgemm;

pub use matmul::{matmul_nt, matmul_nt_into};
pub use norm::{SumOrder, argmax, rms_norm_bf16, rms_norm_bf16_in, softmax_in_place, sum_squares};
pub use qgemm::{BlockScaledWeight, Fp8Weight, QBLOCK, QuantActs, qgemm_bf16, qgemm_f32};
