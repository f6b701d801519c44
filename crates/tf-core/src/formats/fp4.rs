//! FP4 E2M1 (OCP MX element): 2 exponent bits (bias 1), 1 mantissa bit, values ±{0,.5,1,1.5,2,3,4,6}.

use super::minifloat::MiniFloat;

/// Largest E2M1 magnitude.
pub const E2M1_MAX: f32 = 6.0;

const E2M1: MiniFloat = MiniFloat { man_bits: 1, bias: 1, max_code: 7 };

/// The 16 codes decoded; bit 3 is the sign, so code 8 is −0.
pub const E2M1_TABLE: [f32; 16] =
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];

/// f32 → E2M1 code, round to nearest even on the grid, saturating at ±6; NaN gives ±0 as in DeepSeek's port.
pub fn f32_to_e2m1(x: f32) -> u8 {
    let sign = if x.is_sign_negative() { 8 } else { 0 };
    let a = x.abs();
    let mag = if a.is_nan() { 0 } else { E2M1.encode_magnitude(a) };
    sign | mag as u8
}

/// E2M1 code (low 4 bits) → f32.
#[inline]
pub fn e2m1_to_f32(code: u8) -> f32 {
    E2M1_TABLE[(code & 0xF) as usize]
}

/// Packs codes two per byte, the even element in the low nibble (DeepSeek `float4_e2m1fn_x2`, gpt-oss MXFP4).
pub fn pack_fp4(codes: &[u8]) -> Vec<u8> {
    assert!(codes.len().is_multiple_of(2), "fp4 packing needs an even element count, got {}", codes.len());
    codes.chunks_exact(2).map(|p| (p[0] & 0xF) | ((p[1] & 0xF) << 4)).collect()
}

/// Unpacks bytes into two codes each, low nibble first.
pub fn unpack_fp4(packed: &[u8]) -> Vec<u8> {
    packed.iter().flat_map(|&b| [b & 0xF, b >> 4]).collect()
}

/// Decodes packed FP4 bytes straight to f32 values, low nibble first.
pub fn unpack_fp4_f32(packed: &[u8], out: &mut [f32]) {
    assert_eq!(out.len(), packed.len() * 2, "fp4 decode: output must hold two values per byte");
    for (o, &b) in out.chunks_exact_mut(2).zip(packed) {
        o[0] = E2M1_TABLE[(b & 0xF) as usize];
        o[1] = E2M1_TABLE[(b >> 4) as usize];
    }
}
