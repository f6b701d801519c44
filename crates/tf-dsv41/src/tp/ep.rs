//! Expert parallel (issue 25): each rank runs its own routed experts; every rank gathers all outputs and sums them in expert order.

use super::partition;
use parking_lot::Mutex;
use std::sync::Arc;
use tf_collective::Comm;
use tf_core::bf16;
use tf_core::formats::to_bf16;

/// One rank's communicator, shared by its lockstep driver and its MoE layers (all on one thread, one collective at a time).
#[derive(Clone)]
pub struct SharedComm(Arc<Mutex<Box<dyn Comm>>>);

impl SharedComm {
    pub fn new(comm: Box<dyn Comm>) -> SharedComm {
        SharedComm(Arc::new(Mutex::new(comm)))
    }

    /// Runs `f` on the communicator.
    pub fn with<R>(&self, f: impl FnOnce(&dyn Comm) -> R) -> R {
        f(&**self.0.lock())
    }

    pub fn rank(&self) -> usize {
        self.with(|c| c.rank())
    }

    pub fn world_size(&self) -> usize {
        self.with(|c| c.world_size())
    }
}

impl std::fmt::Debug for SharedComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.with(|c| write!(f, "SharedComm(rank {} of {})", c.rank(), c.world_size()))
    }
}

/// Every expert's output rows (bf16, in `picks(e)` order) on every rank, from this rank's `mine` (its owned experts with picks, in order).
pub fn gather_experts(
    comm: &SharedComm,
    mine: Vec<Vec<bf16>>,
    experts: usize,
    picks: &dyn Fn(usize) -> Vec<(usize, f32)>,
    dim: usize,
) -> Vec<Vec<bf16>> {
    let parts = partition(experts, comm.world_size());
    let rows: Vec<usize> = (0..experts).map(|e| picks(e).len()).collect();
    let sizes: Vec<usize> = parts.iter().map(|p| p.clone().map(|e| rows[e]).sum::<usize>() * dim).collect();
    let max = sizes.iter().copied().max().unwrap_or(0);
    let mut out = vec![Vec::new(); experts];
    // Every rank computes the same sizes from the same routes, so all skip together or all gather.
    if max == 0 {
        return out;
    }
    let mut send: Vec<f32> = mine.iter().flatten().map(|v| v.to_f32()).collect();
    send.resize(max, 0.0);
    let mut all = vec![0.0f32; max * parts.len()];
    comm.with(|c| c.all_gather(&send, &mut all))
        .unwrap_or_else(|e| panic!("expert parallel: gathering expert outputs failed: {e}"));
    for (r, part) in parts.iter().enumerate() {
        let mut at = r * max;
        for e in part.clone() {
            let n = rows[e] * dim;
            out[e] = all[at..at + n].iter().map(|&v| to_bf16(v)).collect();
            at += n;
        }
    }
    out
}

/// Every row whole again from each rank's column share: rank `r` holds columns `parts[r]` (in units of `unit`) of all `rows`.
pub fn gather_cols(
    comm: &SharedComm,
    local: &[bf16],
    rows: usize,
    parts: &[std::ops::Range<usize>],
    unit: usize,
) -> Vec<bf16> {
    let max = parts.iter().map(|p| p.len()).max().unwrap_or(0) * unit * rows;
    let width = parts.last().map_or(0, |p| p.end) * unit;
    let mut send: Vec<f32> = local.iter().map(|v| v.to_f32()).collect();
    send.resize(max, 0.0);
    let mut all = vec![0.0f32; max * parts.len()];
    comm.with(|c| c.all_gather(&send, &mut all))
        .unwrap_or_else(|e| panic!("tensor parallel: gathering attention outputs failed: {e}"));
    let mut out = vec![bf16::ZERO; rows * width];
    for (r, part) in parts.iter().enumerate() {
        let n = part.len() * unit;
        for (row, src) in all[r * max..r * max + rows * n].chunks_exact(n.max(1)).take(rows).enumerate() {
            let dst = &mut out[row * width + part.start * unit..row * width + part.end * unit];
            dst.iter_mut().zip(src).for_each(|(d, &s)| *d = to_bf16(s));
        }
    }
    out
}
