//! E8M0 scales (OCP MX, torch `float8_e8m0fnu`): value 2^(byte − 127), byte 255 = NaN, no zero or sign.

/// NaN code.
pub const E8M0_NAN: u8 = 0xFF;

/// E8M0 byte → f32: 2^(b−127); byte 0 is the f32 subnormal 2^−127.
#[inline]
pub fn e8m0_to_f32(b: u8) -> f32 {
    match b {
        0xFF => f32::NAN,
        0 => f32::from_bits(0x0040_0000),
        _ => f32::from_bits((b as u32) << 23),
    }
}

/// Smallest representable 2^k ≥ x for positive finite x (exact for powers of two); NaN, ≤ 0 or ∞ → NaN code.
pub fn f32_to_e8m0_ceil(x: f32) -> u8 {
    if x.is_nan() || x <= 0.0 || x.is_infinite() {
        return E8M0_NAN;
    }
    let bits = x.to_bits();
    let exp = (bits >> 23) & 0xFF;
    let man = bits & 0x7F_FFFF;
    if exp == 0 {
        // f32 subnormals: 2^−127 covers (0, 2^−127], anything larger rounds up to 2^−126.
        return if bits <= 0x0040_0000 { 0 } else { 1 };
    }
    let e = exp + u32::from(man != 0);
    e.min(254) as u8
}

/// `2^ceil(log2(amax · max_inv))` by exponent bits, exactly as DeepSeek's `fast_round_scale` (K41:22-38).
#[inline]
pub fn fast_round_scale(amax: f32, max_inv: f32) -> f32 {
    let bits = (amax * max_inv).to_bits() as i32;
    let exp = (bits >> 23) & 0xFF;
    let man = bits & 0x7F_FFFF;
    let log2_ceil = exp - 127 + i32::from(man != 0);
    f32::from_bits(((log2_ceil + 127) << 23) as u32)
}

/// E8M0 byte of a power-of-two scale made by `fast_round_scale` (its exponent field).
#[inline]
pub fn pow2_scale_to_e8m0(s: f32) -> u8 {
    ((s.to_bits() >> 23) & 0xFF) as u8
}
