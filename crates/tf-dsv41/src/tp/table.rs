//! Tables split by rows (issue 25): the embedding, head and Markov head by vocabulary, the Engram tables by row; rows and logits gathered.

use super::{SharedComm, gather_cols, gather_owned, partition};
use crate::linear::Dense;
use std::ops::Range;
use tf_core::bf16;

/// This rank's share of a table's rows (a vocabulary, an Engram table); each logit stays one rank's whole dot product, so any world gives TP1's bits.
#[derive(Clone, Debug)]
pub struct TableSplit {
    pub rank: usize,
    /// Every rank's rows (token ids, Engram rows).
    pub parts: Vec<Range<usize>>,
    /// Set by `Model::attach_comm` before the first forward.
    pub comm: Option<SharedComm>,
}

impl TableSplit {
    pub fn new(rows: usize, rank: usize, world: usize) -> TableSplit {
        TableSplit { rank, parts: partition(rows, world), comm: None }
    }

    fn comm(&self) -> &SharedComm {
        self.comm.as_ref().expect("a vocabulary split has its communicator (Model::attach_comm)")
    }

    /// This rank's rows.
    pub fn mine(&self) -> Range<usize> {
        self.parts[self.rank].clone()
    }

    /// This rank's rows of a vocabulary-sized `Dense` (the head, the Markov head).
    pub fn narrow(&self, d: &Dense) -> Dense {
        let m = self.mine();
        Dense { out: m.len(), inp: d.inp, w: d.w[m.start * d.inp..m.end * d.inp].to_vec() }
    }

    /// Whole logits rows (`rows × vocab`) from this rank's columns of each.
    pub fn logits(&self, local: &[f32], rows: usize) -> Vec<f32> {
        gather_cols(self.comm(), local, rows, &self.parts, 1)
    }

    /// Every token's `dim`-wide embedding row, `row(t)` read by the rank that holds `t`.
    pub fn embed(&self, tokens: &[u32], dim: usize, row: impl Fn(u32) -> Vec<bf16>) -> Vec<bf16> {
        let ids: Vec<u64> = tokens.iter().map(|&t| u64::from(t)).collect();
        let read =
            |mine: &[u64]| -> Result<Vec<bf16>, String> { Ok(mine.iter().flat_map(|&t| row(t as u32)).collect()) };
        self.rows(&ids, dim, read).expect("embedding rows are read from memory")
    }

    /// Every id's `dim`-wide row in order, read by the rank holding it; a rank whose read fails still sends zeros (no rank waits), then errs.
    pub fn rows(
        &self,
        ids: &[u64],
        dim: usize,
        read: impl FnOnce(&[u64]) -> Result<Vec<bf16>, String>,
    ) -> Result<Vec<bf16>, String> {
        let owner =
            |t: u64| self.parts.iter().position(|p| p.contains(&(t as usize))).expect("ids checked against the table");
        let owners: Vec<usize> = ids.iter().map(|&t| owner(t)).collect();
        let mine: Vec<u64> = ids.iter().zip(&owners).filter(|&(_, &o)| o == self.rank).map(|(&t, _)| t).collect();
        let got = read(&mine);
        let send = match &got {
            Ok(v) => v.clone(),
            Err(_) => vec![bf16::ZERO; mine.len() * dim],
        };
        let out = gather_owned(self.comm(), &owners, dim, send);
        got?;
        Ok(out)
    }
}
