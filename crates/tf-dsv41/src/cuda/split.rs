//! Heads and vocabulary split on GPU ranks (issue 25): each rank's `wo_a` groups, `wo_b` rows and logits, gathered through the host.

use super::layer::GAttn;
use super::model::GpuModel;
use super::ops::Io;
use super::weights::{Acts, Buf};
use crate::tp::{SharedComm, gather_cols};
use std::ops::Range;
use tf_core::bf16;
use tf_cuda::Error;

/// A GPU rank's share of one layer's heads (`AttnWeights::split_heads` on the host, then uploaded).
pub struct GSplit {
    /// This rank's `wo_a` groups.
    pub groups: usize,
    /// Every rank's `wo_a` groups and `wo_b` output rows.
    pub group_parts: Vec<Range<usize>>,
    pub out_parts: Vec<Range<usize>>,
    pub comm: SharedComm,
}

impl GpuModel {
    /// bf16 `[rows, n]` of a device buffer, on the host.
    fn host_bf16(&self, b: &Buf, n: usize) -> Result<Vec<bf16>, Error> {
        let v: Vec<u16> = self.gpu.download(b)?;
        Ok(v[..n].iter().map(|&x| bf16::from_bits(x)).collect())
    }

    /// `wo_b(wo_a(o))` of the call's rows: over this rank's heads and `wo_b` rows under a split, every rank's outputs gathered.
    pub(crate) fn attn_output(&self, a: &GAttn, o: Option<&Buf>, rows: usize) -> Result<Buf, Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let width = cfg.o_groups * cfg.o_lora_rank;
        let Some(s) = &a.split else {
            let o = o.expect("an unsplit layer has every head");
            let u = self.phase("attn: wo_a", || a.wo_a.forward(gpu, o, Io::Bf16, Io::Bf16, rows, cfg.o_groups))?;
            return self.phase("attn: wo_b", || a.wo_b.forward(gpu, &Acts::new(&u, rows, width)));
        };
        // A rank without heads (or without `wo_b` rows) launches nothing for them and sends nothing.
        let local_u = match o {
            Some(o) => {
                let u = self.phase("attn: wo_a", || a.wo_a.forward(gpu, o, Io::Bf16, Io::Bf16, rows, s.groups))?;
                self.host_bf16(&u, rows * s.groups * cfg.o_lora_rank)?
            }
            None => Vec::new(),
        };
        let u = gather_cols(&s.comm, &local_u, rows, &s.group_parts, cfg.o_lora_rank);
        let u = gpu.upload(&u.iter().map(|v| v.to_bits()).collect::<Vec<u16>>())?;
        let mine = s.out_parts[s.comm.rank()].len();
        let local_y = if mine > 0 {
            let y = self.phase("attn: wo_b", || a.wo_b.forward(gpu, &Acts::new(&u, rows, width)))?;
            self.host_bf16(&y, rows * mine)?
        } else {
            Vec::new()
        };
        let y = gather_cols(&s.comm, &local_y, rows, &s.out_parts, 1);
        gpu.upload(&y.iter().map(|v| v.to_bits()).collect::<Vec<u16>>())
    }

    /// Logits rows of the whole vocabulary from this rank's f32 `[rows, share]` (the head's or Markov head's), on the host.
    pub(crate) fn vocab_rows(&self, local: &Buf, rows: usize) -> Result<Vec<f32>, Error> {
        let mut v: Vec<f32> = self.gpu.download(local)?;
        match &self.vocab {
            Some(t) => {
                v.truncate(rows * t.mine().len());
                Ok(t.logits(&v, rows))
            }
            None => {
                v.truncate(rows * self.cfg().vocab_size);
                Ok(v)
            }
        }
    }
}
