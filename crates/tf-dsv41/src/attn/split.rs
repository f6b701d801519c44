//! Attention heads split over tensor-parallel ranks (issue 25): whole `wo_a` groups per rank, `wo_b` by output rows, outputs gathered.

use super::AttnWeights;
use crate::qlinear::QLinear;
use crate::tp::{SharedComm, gather_cols, out_rows, partition};
use std::ops::Range;
use tf_core::bf16;
use tf_core::ops::qgemm::Fp8Weight;
use tf_core::{Error, Result};

/// This rank's share of one layer's heads; every dot product stays whole on one rank, so any world gives TP1's bits.
#[derive(Clone, Debug)]
pub struct HeadSplit {
    pub rank: usize,
    /// Every rank's `wo_a` groups.
    pub groups: Vec<Range<usize>>,
    /// Every rank's `wo_b` output rows, in 32-row tiles; `None` where `wo_b` stays whole (an EXL3 `wo_b`).
    pub out: Option<Vec<Range<usize>>>,
    /// `wq_b` kept whole (an EXL3 `wq_b`): this rank's heads are cut from its full output.
    pub q_whole: bool,
    /// Set by `Model::attach_comm` before the first forward.
    pub comm: Option<SharedComm>,
}

impl HeadSplit {
    /// This rank's heads.
    pub fn heads(&self, per_group: usize) -> Range<usize> {
        let g = &self.groups[self.rank];
        g.start * per_group..g.end * per_group
    }

    pub(crate) fn comm(&self) -> &SharedComm {
        self.comm.as_ref().expect("a split attention layer has its communicator (Model::attach_comm)")
    }
}

fn narrow(w: &QLinear<Fp8Weight>, rows: &Range<usize>, name: &str) -> Result<Option<QLinear<Fp8Weight>>> {
    match w {
        QLinear::Native(w) => w
            .narrow_rows(rows.start, rows.len())
            .map(|w| Some(QLinear::Native(w)))
            .map_err(|e| Error::Invalid(format!("{name}: {e}"))),
        QLinear::Exl3(_) => Ok(None),
    }
}

impl AttnWeights {
    /// Keeps rank `rank` of `world`'s heads, `wo_a` groups and `wo_b` rows; `layer` names the tensors in errors.
    pub fn split_heads(&mut self, rank: usize, world: usize, layer: &str) -> Result<()> {
        let (d, per_group) = (self.head_dim, self.n_heads / self.o_groups);
        let groups = partition(self.o_groups, world);
        let g = groups[rank].clone();
        let heads = g.start * per_group..g.end * per_group;
        let q_rows = heads.start * d..heads.end * d;
        let q_whole = match narrow(&self.wq_b, &q_rows, &format!("{layer}attn.wq_b"))? {
            Some(w) => {
                self.wq_b = w;
                false
            }
            None => true,
        };
        self.sink = self.sink[heads].to_vec();
        let (rank_w, gin) = (self.o_lora_rank, self.n_heads * d / self.o_groups);
        self.wo_a = self.wo_a[g.start * rank_w * gin..g.end * rank_w * gin].to_vec();
        let parts = out_rows(self.wo_b.out_features(), world);
        let out = match narrow(&self.wo_b, &parts[rank], &format!("{layer}attn.wo_b"))? {
            Some(w) => {
                self.wo_b = w;
                Some(parts)
            }
            None => None,
        };
        self.split = Some(HeadSplit { rank, groups, out, q_whole, comm: None });
        Ok(())
    }

    /// This rank's heads of `q` (`rows × heads·d`, or every head where `wq_b` stays whole).
    pub(crate) fn local_q(&self, q: Vec<bf16>, rows: usize) -> Vec<bf16> {
        let Some(s) = self.split.as_ref().filter(|s| s.q_whole) else { return q };
        let (d, h) = (self.head_dim, s.heads(self.n_heads / self.o_groups));
        let width = self.n_heads * d;
        (0..rows).flat_map(|r| q[r * width + h.start * d..r * width + h.end * d].iter().copied()).collect()
    }

    /// `wo_b` of the grouped outputs `u` (this rank's groups), gathered so every rank holds all `rows × dim`.
    pub(crate) fn output(&self, u: Vec<bf16>, rows: usize) -> Vec<bf16> {
        let Some(s) = &self.split else { return self.wo_b.forward(&u, rows) };
        let u = gather_cols(s.comm(), &u, rows, &s.groups, self.o_lora_rank);
        let y = self.wo_b.forward(&u, rows);
        match &s.out {
            Some(parts) => gather_cols(s.comm(), &y, rows, parts, 1),
            None => y,
        }
    }
}
