//! Host tensors: a shape, a dtype and contiguous bytes, owned or borrowed from a memory-mapped file.

use crate::error::{Error, Result};
use crate::{DType, formats};
use half::bf16;
use memmap2::Mmap;
use std::sync::Arc;

/// Where a tensor's bytes live; clones share the buffer.
#[derive(Clone)]
enum Buffer {
    /// Owned bytes kept in u64 words so every dtype's typed view is aligned.
    Owned(Arc<Vec<u64>>),
    Mapped(Arc<Mmap>),
}

/// A contiguous, row-major host tensor; cloning and narrowing along dim 0 copy no data.
#[derive(Clone)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    buffer: Buffer,
    offset: usize,
    len: usize,
}

fn byte_len(dtype: DType, shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
}

impl Tensor {
    /// A tensor over owned little-endian bytes; fails if the length disagrees with the shape.
    pub fn from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Tensor> {
        let len = byte_len(dtype, shape).ok_or_else(|| Error::Invalid(format!("shape {shape:?} overflows")))?;
        if len != bytes.len() {
            return Err(Error::Invalid(format!("{dtype} {shape:?} needs {len} bytes, got {}", bytes.len())));
        }
        let mut words = vec![0u64; len.div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len].copy_from_slice(bytes);
        Ok(Tensor { dtype, shape: shape.to_vec(), buffer: Buffer::Owned(Arc::new(words)), offset: 0, len })
    }

    /// An f32 tensor taking its values.
    pub fn from_f32(shape: &[usize], values: &[f32]) -> Result<Tensor> {
        Tensor::from_bytes(DType::F32, shape, bytemuck::cast_slice(values))
    }

    /// A bf16 tensor taking its values.
    pub fn from_bf16(shape: &[usize], values: &[bf16]) -> Result<Tensor> {
        Tensor::from_bytes(DType::BF16, shape, bytemuck::cast_slice(values))
    }

    /// All-zero tensor.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Tensor> {
        let len = byte_len(dtype, shape).ok_or_else(|| Error::Invalid(format!("shape {shape:?} overflows")))?;
        Tensor::from_bytes(dtype, shape, &vec![0u8; len])
    }

    /// A zero-copy view of `len` bytes at `offset` of a mapped file; the caller has checked the bounds.
    pub(crate) fn mapped(dtype: DType, shape: Vec<usize>, map: Arc<Mmap>, offset: usize, len: usize) -> Tensor {
        debug_assert!(offset + len <= map.len());
        Tensor { dtype, shape, buffer: Buffer::Mapped(map), offset, len }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of stored elements (bytes for `Fp4x2`, which holds pairs).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn nbytes(&self) -> usize {
        self.len
    }

    /// True when the bytes are a view into a memory-mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.buffer, Buffer::Mapped(_))
    }

    /// The raw little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        let all: &[u8] = match &self.buffer {
            Buffer::Owned(w) => bytemuck::cast_slice(w.as_slice()),
            Buffer::Mapped(m) => m,
        };
        &all[self.offset..self.offset + self.len]
    }

    /// Typed view; fails if `T` does not match the dtype's width or the bytes are misaligned for `T`.
    pub fn as_slice<T: bytemuck::Pod>(&self) -> Result<&[T]> {
        if std::mem::size_of::<T>() != self.dtype.size() {
            return Err(Error::Invalid(format!(
                "cannot view {} as a {}-byte type",
                self.dtype,
                std::mem::size_of::<T>()
            )));
        }
        bytemuck::try_cast_slice(self.bytes())
            .map_err(|e| Error::Invalid(format!("{} view of {:?}: {e}", self.dtype, self.shape)))
    }

    /// Values decoded to f32 for float dtypes (exact for every type but F64).
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        match self.dtype {
            DType::F32 => {
                Ok(self.bytes().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
            }
            DType::BF16 => Ok(self
                .bytes()
                .chunks_exact(2)
                .map(|b| formats::bf16_bits_to_f32(u16::from_le_bytes([b[0], b[1]])))
                .collect()),
            DType::F8E4M3 => Ok(self.bytes().iter().map(|&b| formats::e4m3_to_f32(b)).collect()),
            d if d.is_float() => {
                Ok(self.bytes().chunks_exact(d.size()).map(|b| d.decode_f32(b).unwrap_or(f32::NAN)).collect())
            }
            d => Err(Error::Invalid(format!("to_f32: {d} is not a float type"))),
        }
    }

    /// Values as bf16 for BF16 tensors, copying when the bytes are misaligned.
    pub fn to_bf16_vec(&self) -> Result<Vec<bf16>> {
        if self.dtype != DType::BF16 {
            return Err(Error::Invalid(format!("to_bf16: tensor is {}", self.dtype)));
        }
        Ok(self.bytes().chunks_exact(2).map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]]))).collect())
    }

    /// Rows `start..start+count` along dim 0, sharing the buffer.
    pub fn narrow0(&self, start: usize, count: usize) -> Result<Tensor> {
        let rows = *self.shape.first().ok_or_else(|| Error::Invalid("narrow0 of a scalar".into()))?;
        if start.checked_add(count).is_none_or(|end| end > rows) {
            return Err(Error::Invalid(format!("narrow0 {start}+{count} out of {rows} rows")));
        }
        let row_bytes = self.len.checked_div(rows).unwrap_or(0);
        let mut shape = self.shape.clone();
        shape[0] = count;
        Ok(Tensor { shape, offset: self.offset + start * row_bytes, len: count * row_bytes, ..self.clone() })
    }

    /// Same bytes under another shape with the same byte count.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if byte_len(self.dtype, shape) != Some(self.len) {
            return Err(Error::Invalid(format!("reshape {:?} to {shape:?}: sizes differ", self.shape)));
        }
        Ok(Tensor { shape: shape.to_vec(), ..self.clone() })
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = if self.is_mapped() { "mapped" } else { "owned" };
        write!(f, "Tensor({} {:?}, {} bytes {place})", self.dtype, self.shape, self.len)
    }
}
