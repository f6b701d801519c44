//! Writing safetensors files, for test fixtures and tiny synthetic checkpoints.

use crate::error::{Error, Result};
use crate::{DType, Tensor};
use safetensors::{Dtype, View};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

struct TensorView<'a>(&'a Tensor);

fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::Bool => Dtype::BOOL,
        DType::U8 => Dtype::U8,
        DType::I8 | DType::Fp4x2 => Dtype::I8,
        DType::F8E4M3 => Dtype::F8_E4M3,
        DType::F8E8M0 => Dtype::F8_E8M0,
        DType::I16 => Dtype::I16,
        DType::U16 => Dtype::U16,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I32 => Dtype::I32,
        DType::U32 => Dtype::U32,
        DType::F32 => Dtype::F32,
        DType::I64 => Dtype::I64,
        DType::U64 => Dtype::U64,
        DType::F64 => Dtype::F64,
    }
}

impl View for TensorView<'_> {
    fn dtype(&self) -> Dtype {
        st_dtype(self.0.dtype())
    }
    fn shape(&self) -> &[usize] {
        self.0.shape()
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.0.bytes())
    }
    fn data_len(&self) -> usize {
        self.0.nbytes()
    }
}

/// Serializes named tensors to a safetensors byte buffer.
pub fn to_bytes(tensors: &[(&str, &Tensor)], metadata: Option<HashMap<String, String>>) -> Result<Vec<u8>> {
    let views = tensors.iter().map(|(n, t)| (n.to_string(), TensorView(t)));
    safetensors::serialize(views, metadata).map_err(|e| Error::Invalid(format!("serialize: {e}")))
}

/// Writes named tensors to `path` as one safetensors file.
pub fn write_file(path: &Path, tensors: &[(&str, &Tensor)], metadata: Option<HashMap<String, String>>) -> Result<()> {
    let bytes = to_bytes(tensors, metadata)?;
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}
