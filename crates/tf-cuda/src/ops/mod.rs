//! Launchers of our kernels: each checks its shapes and buffer sizes, then queues one launch on the GPU's stream.

mod fp8;
mod rmsnorm;

pub use fp8::{
    FP8_MAX_ROWS, FP8_WIDE_SMEM, Fp8Decode, Fp8Kernel, WeightScale, act_quant_fp8, fp8_default_kernel, fp8_gemv,
    fp8_gemv_bf16, fp8_gemv_smem_bytes, fp8_gemv_with, fp8_wide_smem_bytes,
};
pub use rmsnorm::{RMSNORM_THREADS, RmsNormKernel, rms_norm_rows, rmsnorm_bf16};

pub(crate) use crate::launch::{as_i32, check_len};
