//! EXL3's procedural codebooks (quant.md §1.6): a 16-bit trellis state to an fp16 weight, bit-exact.

use tf_core::formats::{f16_bits_to_f32, f32_to_f16_bits};

/// QTIP's 3INST multiplier and addend (codebook 0).
const INST3_MUL: u32 = 89_226_354;
const INST3_ADD: u32 = 64_248_484;
/// The locked MCG multiplier (codebook 1), as the `.mcg` marker stores it.
pub const MCG_MULT: u32 = 0xCBAC_1FED;
/// The locked MUL1 multiplier (codebook 2), as the `.mul1` marker stores it.
pub const MUL1_MULT: u32 = 0x83DC_D12D;
/// MUL1's fp16 slope and intercept: `(1024 + bytesum) · K_INV + K_BIAS`.
const MUL1_K_INV: u16 = 0x1EEE;
const MUL1_K_BIAS: u16 = 0xC931;

/// Which codebook a tensor's states decode through; the `.mcg` / `.mul1` markers pick it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codebook {
    /// No marker: QTIP's 3INST.
    Inst3,
    /// `.mcg`: multiply-only linear congruential.
    Mcg,
    /// `.mul1`: one multiply, byte sum, one fp16 fma.
    Mul1,
}

impl Codebook {
    /// The index upstream uses (0 = 3INST, 1 = MCG, 2 = MUL1).
    pub fn index(self) -> u32 {
        match self {
            Codebook::Inst3 => 0,
            Codebook::Mcg => 1,
            Codebook::Mul1 => 2,
        }
    }

    /// The fp16 bits of `state`'s weight.
    pub fn decode(self, state: u16) -> u16 {
        let x = u32::from(state);
        match self {
            Codebook::Inst3 => two_halves(x.wrapping_mul(INST3_MUL).wrapping_add(INST3_ADD)),
            Codebook::Mcg => two_halves(x.wrapping_mul(MCG_MULT)),
            Codebook::Mul1 => {
                let sum = mul1_bytesum(state);
                // 1024 + sum (≤ 2044) times an 11-bit fp16 plus an fp16 is exact in f32, so this rounds once, as __hfma.
                let h = (1024 + sum) as f32;
                f32_to_f16_bits(h * f16_bits_to_f32(MUL1_K_INV) + f16_bits_to_f32(MUL1_K_BIAS))
            }
        }
    }

    /// The weight of `state` as f32 (exact: every fp16 is an f32).
    pub fn value(self, state: u16) -> f32 {
        f16_bits_to_f32(self.decode(state))
    }
}

/// The byte sum of a state's MUL1 product (0..=1020), the integer MUL1's value is affine in.
pub fn mul1_bytesum(state: u16) -> u32 {
    u32::from(state).wrapping_mul(MUL1_MULT).to_le_bytes().iter().map(|&b| u32::from(b)).sum()
}

/// 3INST/MCG: keep sign and low 12 bits of each half, force the exponent, and add the two fp16 halves.
fn two_halves(x: u32) -> u16 {
    let x = (x & 0x8FFF_8FFF) ^ 0x3B60_3B60;
    // Both halves lie in ±[0.125, 2): their f32 sum is exact, so rounding it to fp16 is __hadd's single rounding.
    f32_to_f16_bits(f16_bits_to_f32(x as u16) + f16_bits_to_f32((x >> 16) as u16))
}
