//! FP8 E4M3FN: 4 exponent bits (bias 7), 3 mantissa bits, no infinities, 0x7F/0xFF = NaN, max 448.

use super::minifloat::MiniFloat;

/// Largest finite E4M3FN magnitude.
pub const E4M3_MAX: f32 = 448.0;
/// Canonical NaN code (torch and CUDA produce the positive one).
pub const E4M3_NAN: u8 = 0x7F;

const E4M3: MiniFloat = MiniFloat { man_bits: 3, bias: 7, max_code: 0x7E };

/// Every E4M3FN code decoded to f32, built at compile time.
static E4M3_LUT: [f32; 256] = build_lut();

const fn build_lut() -> [f32; 256] {
    let mut lut = [0.0f32; 256];
    let mut c = 0;
    while c < 256 {
        let mag = (c & 0x7F) as u32;
        let v = if mag == 0x7F { f32::NAN } else { E4M3.decode_magnitude(mag) };
        lut[c] = if c & 0x80 != 0 { -v } else { v };
        c += 1;
    }
    lut
}

/// f32 → E4M3FN, round to nearest even, saturating to ±448 (CUDA `satfinite`): ±inf → ±448, NaN → NaN.
pub fn f32_to_e4m3(x: f32) -> u8 {
    if x.is_nan() {
        return E4M3_NAN;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    sign | E4M3.encode_magnitude(x.abs()) as u8
}

/// E4M3FN → f32 (exact).
#[inline]
pub fn e4m3_to_f32(b: u8) -> f32 {
    E4M3_LUT[b as usize]
}

/// Table of all 256 decoded codes, for vectorised dequantisation.
pub fn e4m3_table() -> &'static [f32; 256] {
    &E4M3_LUT
}
