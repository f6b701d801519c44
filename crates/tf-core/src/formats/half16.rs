//! bf16 and f16: conversions from f32 with round-to-nearest-even, and back (exact).

use half::{bf16, f16};

/// f32 → bf16 bits, round to nearest even; NaN stays a quiet NaN with its sign.
#[inline]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    let round = 0x7FFF + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// bf16 bits → f32 (exact).
#[inline]
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// f32 → bf16, round to nearest even.
#[inline]
pub fn to_bf16(x: f32) -> bf16 {
    bf16::from_bits(f32_to_bf16_bits(x))
}

/// Rounds an f32 through bf16 and back: the reference's `.to(bfloat16)` boundary.
#[inline]
pub fn round_bf16(x: f32) -> f32 {
    bf16_bits_to_f32(f32_to_bf16_bits(x))
}

/// f32 → f16 bits, round to nearest even, overflow to ±inf, NaN kept.
#[inline]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// f16 bits → f32 (exact).
#[inline]
pub fn f16_bits_to_f32(b: u16) -> f32 {
    f16::from_bits(b).to_f32()
}
