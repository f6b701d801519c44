//! Element types a checkpoint or tensor can hold, with their safetensors names.

use crate::formats::{bf16_bits_to_f32, e4m3_to_f32, e8m0_to_f32, f16_bits_to_f32};
use std::fmt;

/// An element type; `Fp4x2` is two E2M1 values per byte (DeepSeek stores it as `I8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    Bool,
    U8,
    I8,
    Fp4x2,
    F8E4M3,
    F8E8M0,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    I64,
    U64,
    F64,
}

impl DType {
    /// Bytes per stored element (`Fp4x2` counts one byte per pair).
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 | DType::Fp4x2 | DType::F8E4M3 | DType::F8E8M0 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// The safetensors header name.
    pub fn safetensors_name(self) -> &'static str {
        match self {
            DType::Bool => "BOOL",
            DType::U8 => "U8",
            DType::I8 => "I8",
            DType::Fp4x2 => "I8",
            DType::F8E4M3 => "F8_E4M3",
            DType::F8E8M0 => "F8_E8M0",
            DType::I16 => "I16",
            DType::U16 => "U16",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I32 => "I32",
            DType::U32 => "U32",
            DType::F32 => "F32",
            DType::I64 => "I64",
            DType::U64 => "U64",
            DType::F64 => "F64",
        }
    }

    /// Parses a safetensors header name; `None` for types the engine does not read (packed FP4 arrives as `I8`).
    pub fn from_safetensors_name(name: &str) -> Option<DType> {
        ALL.iter().copied().find(|d| *d != DType::Fp4x2 && d.safetensors_name() == name)
    }

    /// True for the types `Tensor::to_f32_vec` can decode.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F8E4M3 | DType::F8E8M0 | DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Decodes one element from its little-endian bytes to f32, for float types.
    pub fn decode_f32(self, b: &[u8]) -> Option<f32> {
        Some(match self {
            DType::F8E4M3 => e4m3_to_f32(b[0]),
            DType::F8E8M0 => e8m0_to_f32(b[0]),
            DType::F16 => f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]])),
            DType::BF16 => bf16_bits_to_f32(u16::from_le_bytes([b[0], b[1]])),
            DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            DType::F64 => f64::from_le_bytes(b[..8].try_into().ok()?) as f32,
            _ => return None,
        })
    }
}

const ALL: [DType; 16] = [
    DType::Bool,
    DType::U8,
    DType::I8,
    DType::Fp4x2,
    DType::F8E4M3,
    DType::F8E8M0,
    DType::I16,
    DType::U16,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::U32,
    DType::F32,
    DType::I64,
    DType::U64,
    DType::F64,
];

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.safetensors_name())
    }
}
