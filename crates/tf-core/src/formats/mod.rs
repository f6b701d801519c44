//! Exact number formats: each conversion is a plain function, tested against the spec's stated cases.

pub mod e8m0;
pub mod fp4;
pub mod fp8;
pub mod half16;
mod minifloat;
pub mod quant;

pub use e8m0::{E8M0_NAN, e8m0_to_f32, f32_to_e8m0_ceil, fast_round_scale, pow2_scale_to_e8m0};
pub use fp4::{E2M1_MAX, E2M1_TABLE, e2m1_to_f32, f32_to_e2m1, pack_fp4, unpack_fp4, unpack_fp4_f32};
pub use fp8::{E4M3_MAX, E4M3_NAN, e4m3_table, e4m3_to_f32, f32_to_e4m3};
pub use half16::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, round_bf16, to_bf16};
pub use quant::{Fp4Groups, Fp4Scale, Fp8Groups, qdq_fp4, qdq_fp8_pow2, quant_fp4, quant_fp8_pow2};
