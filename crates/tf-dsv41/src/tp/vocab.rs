//! The embedding, head and DSpark Markov head split by vocabulary (issue 25): a share of rows per rank, rows and logits gathered.

use super::ep::gather_f32;
use super::{SharedComm, gather_cols, partition};
use crate::linear::Dense;
use std::ops::Range;
use tf_core::bf16;

/// This rank's share of the vocabulary; each logit stays one rank's whole dot product, so any world gives TP1's bits.
#[derive(Clone, Debug)]
pub struct VocabSplit {
    pub rank: usize,
    /// Every rank's token ids.
    pub parts: Vec<Range<usize>>,
    /// Set by `Model::attach_comm` before the first forward.
    pub comm: Option<SharedComm>,
}

impl VocabSplit {
    pub fn new(vocab: usize, rank: usize, world: usize) -> VocabSplit {
        VocabSplit { rank, parts: partition(vocab, world), comm: None }
    }

    fn comm(&self) -> &SharedComm {
        self.comm.as_ref().expect("a vocabulary split has its communicator (Model::attach_comm)")
    }

    /// This rank's token ids.
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
        let owner = |t: u32| {
            self.parts.iter().position(|p| p.contains(&(t as usize))).expect("ids checked against the vocabulary")
        };
        let sizes: Vec<usize> =
            (0..self.parts.len()).map(|r| tokens.iter().filter(|&&t| owner(t) == r).count() * dim).collect();
        let mine: Vec<f32> =
            tokens.iter().filter(|&&t| owner(t) == self.rank).flat_map(|&t| row(t)).map(|v| v.to_f32()).collect();
        let ranks = gather_f32(self.comm(), mine, &sizes, "embedding rows");
        let mut at = vec![0; ranks.len()];
        let mut out = Vec::with_capacity(tokens.len() * dim);
        for &t in tokens {
            let r = owner(t);
            out.extend(ranks[r][at[r]..at[r] + dim].iter().map(|&v| tf_core::formats::to_bf16(v)));
            at[r] += dim;
        }
        out
    }
}
