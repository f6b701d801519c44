//! Engram tables behind a small trait, with the checkpoint's FP8 row + E8M0 scale dequantization to bf16.

use crate::{EngramError, Result};
use tf_core::formats::{e4m3_table, e8m0_to_f32, to_bf16};
use tf_core::{Checkpoint, DType, Tensor, bf16};

/// Channels that share one E8M0 scale in a stored row.
pub const SCALE_BLOCK: usize = 32;

/// A table of `rows × dim` bf16 rows addressed by Engram hash ids.
pub trait EngramTable: Send + Sync {
    /// Names the table in errors (e.g. `layers.1.engram.embed`).
    fn name(&self) -> &str;
    fn rows(&self) -> u64;
    fn dim(&self) -> usize;
    /// Writes row `ids[i]` into `out[i·dim..(i+1)·dim]`; an id past the table is an error naming it.
    fn gather(&self, ids: &[u64], out: &mut [bf16]) -> Result<()>;
}

/// A gather's arguments against its table: `out` holds `ids.len()` rows and every id is a row; errors name the table.
pub(crate) fn check_gather(t: &dyn EngramTable, ids: &[u64], out: &[bf16]) -> Result<()> {
    if out.len() != ids.len() * t.dim() {
        let msg = format!("{} ids need {} outputs, got {}", ids.len(), ids.len() * t.dim(), out.len());
        return Err(EngramError::BadTable { table: t.name().to_string(), msg });
    }
    if let Some(&id) = ids.iter().find(|&&id| id >= t.rows()) {
        return Err(EngramError::IdOutOfRange { table: t.name().to_string(), id, rows: t.rows() });
    }
    Ok(())
}

/// One stored row to bf16: `e4m3 · 2^(scale − 127)` in f32, rounded to nearest even, as the reference does.
pub fn dequant_row(codes: &[u8], scales: &[u8], out: &mut [bf16]) {
    debug_assert_eq!(codes.len(), out.len());
    debug_assert_eq!(codes.len(), scales.len() * SCALE_BLOCK);
    let lut = e4m3_table();
    for ((codes, out), &s) in codes.chunks_exact(SCALE_BLOCK).zip(out.chunks_exact_mut(SCALE_BLOCK)).zip(scales) {
        let scale = e8m0_to_f32(s);
        for (o, &c) in out.iter_mut().zip(codes) {
            *o = to_bf16(lut[c as usize] * scale);
        }
    }
}

/// A table over host tensors, usually zero-copy views of a memory-mapped checkpoint.
#[derive(Clone, Debug)]
pub struct TensorTable {
    name: String,
    weight: Tensor,
    scale: Tensor,
    rows: u64,
    dim: usize,
}

impl TensorTable {
    /// `weight` is `[rows, dim]` F8E4M3 and `scale` `[rows, dim / 32]` F8E8M0.
    pub fn new(name: impl Into<String>, weight: Tensor, scale: Tensor) -> Result<TensorTable> {
        let name = name.into();
        let bad = |msg: String| EngramError::BadTable { table: name.clone(), msg };
        let (&[rows, dim], &[srows, sdim]) = (weight.shape(), scale.shape()) else {
            return Err(bad(format!("weight {:?} and scale {:?} must both be 2-D", weight.shape(), scale.shape())));
        };
        if weight.dtype() != DType::F8E4M3 || scale.dtype() != DType::F8E8M0 {
            return Err(bad(format!(
                "weight is {} and scale {}; need F8_E4M3 and F8_E8M0",
                weight.dtype(),
                scale.dtype()
            )));
        }
        if dim == 0 || !dim.is_multiple_of(SCALE_BLOCK) || srows != rows || sdim != dim / SCALE_BLOCK {
            let msg =
                format!("weight {:?} needs scale [{rows}, {}], found {:?}", weight.shape(), dim / 32, scale.shape());
            return Err(bad(msg));
        }
        Ok(TensorTable { name, weight, scale, rows: rows as u64, dim })
    }

    /// Opens `{prefix}.weight` and `{prefix}.scale`, e.g. prefix `layers.1.engram.embed`.
    pub fn open(ckpt: &Checkpoint, prefix: &str) -> Result<TensorTable> {
        TensorTable::new(prefix, ckpt.get(&format!("{prefix}.weight"))?, ckpt.get(&format!("{prefix}.scale"))?)
    }
}

impl EngramTable for TensorTable {
    fn name(&self) -> &str {
        &self.name
    }

    fn rows(&self) -> u64 {
        self.rows
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn gather(&self, ids: &[u64], out: &mut [bf16]) -> Result<()> {
        check_gather(self, ids, out)?;
        let dim = self.dim;
        let (codes, scales, sdim) = (self.weight.bytes(), self.scale.bytes(), dim / SCALE_BLOCK);
        for (&id, out) in ids.iter().zip(out.chunks_exact_mut(dim)) {
            let r = id as usize;
            dequant_row(&codes[r * dim..(r + 1) * dim], &scales[r * sdim..(r + 1) * sdim], out);
        }
        Ok(())
    }
}
