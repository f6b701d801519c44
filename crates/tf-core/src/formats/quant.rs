//! Block quantizers of dsv41 §3.1, bit-exact to DeepSeek's `act_quant` / `fp4_act_quant` (K41:41-199).

use super::e8m0::{fast_round_scale, pow2_scale_to_e8m0};
use super::fp4::{E2M1_MAX, e2m1_to_f32, f32_to_e2m1};
use super::fp8::{E4M3_MAX, e4m3_to_f32, f32_to_e4m3};
use super::half16::{bf16_bits_to_f32, to_bf16};
use half::bf16;

/// The kernels multiply by the reciprocal rounded to f32 (K41:47,138), not divide by the max.
pub const FP8_MAX_INV: f32 = 1.0 / E4M3_MAX;
/// 1/6 rounded to f32, as the FP4 quantizer multiplies.
pub const FP4_MAX_INV: f32 = 1.0 / E2M1_MAX;
/// Floors on a group's amax so an all-zero group still gets a finite, nonzero scale (FP8 here).
pub const FP8_AMAX_FLOOR: f32 = 1e-4;
/// The E8M0 FP4 group's amax floor.
pub const FP4_E8M0_AMAX_FLOOR: f32 = 6.0 * f32::MIN_POSITIVE;
/// The E4M3 FP4 group's amax floor.
pub const FP4_E4M3_AMAX_FLOOR: f32 = 6.0 / 512.0;

/// FP8 E4M3 codes with one power-of-two scale per group (`scales[i]` covers `codes[i*g..(i+1)*g]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Fp8Groups {
    pub group: usize,
    pub codes: Vec<u8>,
    pub scales: Vec<f32>,
}

/// Packed FP4 E2M1 codes (even element in the low nibble) with one scale byte per group.
#[derive(Clone, Debug, PartialEq)]
pub struct Fp4Groups {
    pub group: usize,
    pub packed: Vec<u8>,
    pub scale_bytes: Vec<u8>,
    pub scale_kind: Fp4Scale,
}

/// How an FP4 group's scale is chosen and stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp4Scale {
    /// Power of two `2^ceil(log2(amax/6))` stored as E8M0 (indexer q/k, MXFP4 weights).
    E8m0,
    /// `e4m3(amax/6)` stored as E4M3 (the compressed KV latent, NVFP4 without its global scale).
    E4m3,
}

fn groups_of(x: &[bf16], group: usize) -> std::slice::ChunksExact<'_, bf16> {
    assert!(group > 0 && x.len().is_multiple_of(group), "length {} is not a multiple of group {group}", x.len());
    x.chunks_exact(group)
}

fn group_amax(g: &[bf16]) -> f32 {
    g.iter().fold(0.0f32, |m, v| m.max(bf16_bits_to_f32(v.to_bits()).abs()))
}

fn fp8_group_scale(g: &[bf16]) -> f32 {
    fast_round_scale(group_amax(g).max(FP8_AMAX_FLOOR), FP8_MAX_INV)
}

fn fp8_code(v: f32, s: f32) -> u8 {
    f32_to_e4m3((v / s).clamp(-E4M3_MAX, E4M3_MAX))
}

/// FP8 activation quantization with power-of-two scales (`act_quant(x, group, "ue8m0")`).
pub fn quant_fp8_pow2(x: &[bf16], group: usize) -> Fp8Groups {
    let mut codes = Vec::with_capacity(x.len());
    let mut scales = Vec::with_capacity(x.len() / group.max(1));
    for g in groups_of(x, group) {
        let s = fp8_group_scale(g);
        codes.extend(g.iter().map(|v| fp8_code(v.to_f32(), s)));
        scales.push(s);
    }
    Fp8Groups { group, codes, scales }
}

/// Quantize then dequantize back into bf16 in place (`act_quant(..., inplace=True)`): the window-KV fake quant.
pub fn qdq_fp8_pow2(x: &mut [bf16], group: usize) {
    assert!(group > 0 && x.len().is_multiple_of(group), "length {} is not a multiple of group {group}", x.len());
    for g in x.chunks_exact_mut(group) {
        let s = fp8_group_scale(g);
        for v in g.iter_mut() {
            *v = to_bf16(e4m3_to_f32(fp8_code(v.to_f32(), s)) * s);
        }
    }
}

impl Fp8Groups {
    /// Element `i` dequantized: code × its group's scale.
    pub fn value(&self, i: usize) -> f32 {
        e4m3_to_f32(self.codes[i]) * self.scales[i / self.group]
    }

    /// E8M0 bytes of the power-of-two scales.
    pub fn scale_bytes(&self) -> Vec<u8> {
        self.scales.iter().map(|&s| pow2_scale_to_e8m0(s)).collect()
    }
}

/// Scale of one FP4 group as f32, and its stored byte.
fn fp4_group_scale(g: &[bf16], kind: Fp4Scale) -> (f32, u8) {
    let amax = group_amax(g);
    match kind {
        Fp4Scale::E8m0 => {
            let s = fast_round_scale(amax.max(FP4_E8M0_AMAX_FLOOR), FP4_MAX_INV);
            (s, pow2_scale_to_e8m0(s))
        }
        Fp4Scale::E4m3 => {
            let b = f32_to_e4m3(amax.max(FP4_E4M3_AMAX_FLOOR) / E2M1_MAX);
            (e4m3_to_f32(b), b)
        }
    }
}

fn fp4_code(v: f32, s: f32) -> u8 {
    f32_to_e2m1((v / s).clamp(-E2M1_MAX, E2M1_MAX))
}

/// FP4 quantization in groups (`fp4_act_quant`): E8M0 with group 32 or E4M3 with group 16 in dsv41.
pub fn quant_fp4(x: &[bf16], group: usize, kind: Fp4Scale) -> Fp4Groups {
    assert!(group.is_multiple_of(2), "fp4 groups must hold whole bytes, got group {group}");
    let mut codes = Vec::with_capacity(x.len());
    let mut scale_bytes = Vec::with_capacity(x.len() / group.max(1));
    for g in groups_of(x, group) {
        let (s, b) = fp4_group_scale(g, kind);
        codes.extend(g.iter().map(|v| fp4_code(v.to_f32(), s)));
        scale_bytes.push(b);
    }
    Fp4Groups { group, packed: super::fp4::pack_fp4(&codes), scale_bytes, scale_kind: kind }
}

/// Quantize then dequantize back into bf16 in place (`fp4_act_quant(..., inplace=True)`).
pub fn qdq_fp4(x: &mut [bf16], group: usize, kind: Fp4Scale) {
    assert!(group > 0 && x.len().is_multiple_of(group), "length {} is not a multiple of group {group}", x.len());
    for g in x.chunks_exact_mut(group) {
        let (s, _) = fp4_group_scale(g, kind);
        for v in g.iter_mut() {
            *v = to_bf16(e2m1_to_f32(fp4_code(v.to_f32(), s)) * s);
        }
    }
}

impl Fp4Groups {
    /// The f32 value of a stored scale byte.
    pub fn scale(&self, group_index: usize) -> f32 {
        let b = self.scale_bytes[group_index];
        match self.scale_kind {
            Fp4Scale::E8m0 => super::e8m0::e8m0_to_f32(b),
            Fp4Scale::E4m3 => e4m3_to_f32(b),
        }
    }

    /// Element `i` dequantized (low nibble = even element).
    pub fn value(&self, i: usize) -> f32 {
        let byte = self.packed[i / 2];
        let code = if i.is_multiple_of(2) { byte & 0xF } else { byte >> 4 };
        e2m1_to_f32(code) * self.scale(i / self.group)
    }
}
