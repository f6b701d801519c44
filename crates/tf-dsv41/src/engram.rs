//! The Engram module (dsv41 §10.2): gathered n-gram rows → `wkv` → per-stream signed-sqrt gate on a shared value.

use crate::qlinear::QLinear;
use std::sync::Arc;
use tf_core::formats::to_bf16;
use tf_core::ops::qgemm::Fp8Weight;
use tf_core::{Checkpoint, Error, Result, bf16};
use tf_engram::{CachedTable, ChunkRows, EngramTable, FileTable, IoMode, TensorTable};

use crate::linear::Dense;

/// One Engram layer: its table, `wkv`, and the folded `q_weight ⊙ k_weight`.
pub struct EngramGate {
    pub table: Arc<dyn EngramTable>,
    pub wkv: QLinear<Fp8Weight>,
    /// `q_weight · k_weight` in f32, `[hc × dim]`: the reference only ever uses the product.
    pub weight: Vec<f32>,
    pub hc: usize,
    pub dim: usize,
    /// Tensor parallel with heads split: this rank reads only its share of the table's rows; the rest are gathered.
    pub split: Option<crate::tp::TableSplit>,
}

impl std::fmt::Debug for EngramGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EngramGate({}, {} rows)", self.table.name(), self.table.rows())
    }
}

impl EngramGate {
    /// The table from `tables` (this checkpoint or DeepSeek's original), the rest from `ck`; `io`: read it from disk in this mode with a hot-row cache of so many rows, refused unless it holds (rows, dim); `None`: the mapped tensor.
    pub fn load(
        (ck, tables): (&Checkpoint, &Checkpoint),
        prefix: &str,
        (hc, dim, cols): (usize, usize, usize),
        io: Option<(IoMode, u64, usize, usize)>,
    ) -> Result<EngramGate> {
        let p = format!("{prefix}engram.");
        let name = format!("{p}embed");
        if !tables.contains(&format!("{name}.weight")) {
            return Err(Error::Invalid(format!(
                "tensor `{name}.weight` is not in the checkpoint; an EXL3 checkpoint keeps no Engram tables: take them from DeepSeek's original one (--engram-from DIR, or its shards in <model dir>/engram)"
            )));
        }
        let table: Arc<dyn EngramTable> = match io {
            None => Arc::new(TensorTable::open(tables, &name).map_err(|e| Error::Invalid(e.to_string()))?),
            Some((mode, rows, tdim, cache)) => {
                let t = FileTable::open_shards(tables, &name, (rows, tdim), mode)
                    .map_err(|e| Error::Invalid(e.to_string()))?;
                if cache > 0 {
                    Arc::new(CachedTable::new(t, cache).map_err(|e| Error::Invalid(e.to_string()))?)
                } else {
                    Arc::new(t)
                }
            }
        };
        let wkv = QLinear::load(ck, &format!("{p}wkv"), dim * (hc + 1), cols * table.dim())?;
        let q = Dense::load(ck, &format!("{p}q_weight"), hc, dim)?.w;
        let k = Dense::load(ck, &format!("{p}k_weight"), hc, dim)?.w;
        let weight = q.iter().zip(&k).map(|(a, b)| a * b).collect();
        Ok(EngramGate { table, wkv, weight, hc, dim, split: None })
    }

    /// Adds the gated value to every stream of each row; `live[r] == false` (image tokens) shuts the gate.
    pub fn forward(
        &self,
        x: &mut [bf16],
        ids: &[&[u64]],
        live: Option<&[bool]>,
        eps: f32,
        ahead: Option<&ChunkRows>,
    ) -> Result<()> {
        let e = self.gather_rows(ids, ahead)?;
        let kv = self.wkv.forward(&e, ids.len());
        gate_rows(x, &kv, &self.weight, (self.hc, self.dim), live, eps);
        Ok(())
    }

    /// The table rows of each row's ids, concatenated per row: from `ahead` when it holds them, else from the table.
    pub fn gather_rows<I: AsRef<[u64]>>(&self, ids: &[I], ahead: Option<&ChunkRows>) -> Result<Vec<bf16>> {
        let width = ids.first().map_or(0, |r| r.as_ref().len()) * self.table.dim();
        let mut e = vec![bf16::ZERO; ids.len() * width];
        self.gather_rows_into(ids, ahead, &mut e)?;
        Ok(e)
    }

    /// [`EngramGate::gather_rows`] into `e` (`ids.len()` rows of ids × table dim), e.g. a pinned staging buffer.
    pub fn gather_rows_into<I: AsRef<[u64]>>(
        &self,
        ids: &[I],
        ahead: Option<&ChunkRows>,
        e: &mut [bf16],
    ) -> Result<()> {
        let width = ids.first().map_or(0, |r| r.as_ref().len()) * self.table.dim();
        if e.len() != ids.len() * width {
            return Err(Error::Invalid(format!("engram rows: {} values for {} rows of {width}", e.len(), ids.len())));
        }
        if let Some(split) = &self.split {
            let flat: Vec<u64> = ids.iter().flat_map(|r| r.as_ref().iter().copied()).collect();
            let rows = split.rows(&flat, self.table.dim(), |mine| self.read(mine, ahead)).map_err(Error::Invalid)?;
            e.copy_from_slice(&rows);
            return Ok(());
        }
        for (row_ids, out) in ids.iter().zip(e.chunks_exact_mut(width.max(1))) {
            // Rows fetched ahead serve this call; rows from earlier chunks (the replay pass) come from the table.
            let got = ahead.map_or(Err(()), |a| a.gather(row_ids.as_ref(), out).map_err(|_| ()));
            if got.is_err() {
                self.table.gather(row_ids.as_ref(), out).map_err(|err| Error::Invalid(err.to_string()))?;
            }
        }
        Ok(())
    }
}

impl EngramGate {
    /// The rows of `ids`, from `ahead` when it holds them all, else from the table.
    fn read(&self, ids: &[u64], ahead: Option<&ChunkRows>) -> std::result::Result<Vec<bf16>, String> {
        let mut out = vec![bf16::ZERO; ids.len() * self.table.dim()];
        if ahead.is_none_or(|a| a.gather(ids, &mut out).is_err()) {
            self.table.gather(ids, &mut out).map_err(|e| e.to_string())?;
        }
        Ok(out)
    }
}

/// The gate on streams `x` `[rows, hc, dim]` from `wkv`'s bf16 output `[rows, (hc+1)·dim]` (hc keys, then the value).
pub fn gate_rows(
    x: &mut [bf16],
    kv: &[bf16],
    weight: &[f32],
    (hc, dim): (usize, usize),
    live: Option<&[bool]>,
    eps: f32,
) {
    let rows = kv.len() / ((hc + 1) * dim);
    let inv_sqrt_dim = (dim as f32).powf(-0.5);
    for r in 0..rows {
        let kvr = &kv[r * (hc + 1) * dim..(r + 1) * (hc + 1) * dim];
        let value = &kvr[hc * dim..];
        for i in 0..hc {
            let xs = &mut x[(r * hc + i) * dim..(r * hc + i + 1) * dim];
            let key = &kvr[i * dim..(i + 1) * dim];
            let w = &weight[i * dim..(i + 1) * dim];
            let h: Vec<f32> = xs.iter().map(|v| v.to_f32()).collect();
            let ms_h = h.iter().map(|v| v * v).sum::<f32>() / dim as f32;
            let ms_k = key.iter().map(|v| v.to_f32() * v.to_f32()).sum::<f32>() / dim as f32;
            let rstd = (1.0 / (ms_h + eps).sqrt()) * (1.0 / (ms_k + eps).sqrt());
            let dot: f32 =
                h.iter().zip(w).zip(key).map(|((a, b), k)| a * b * k.to_f32()).sum::<f32>() * rstd * inv_sqrt_dim;
            let gate =
                if live.is_some_and(|l| !l[r]) { 0.0 } else { sigmoid(dot.abs().max(1e-6).sqrt().copysign(dot)) };
            for ((o, hv), v) in xs.iter_mut().zip(&h).zip(value) {
                *o = to_bf16(hv + gate * v.to_f32());
            }
        }
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + tf_core::ops::math::exp(-x))
}
