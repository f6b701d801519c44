//! Expert parallel (issue 25): each rank runs its own routed experts; every rank gathers all outputs and sums them in expert order.

use super::partition;
use super::rows::Wire;
use parking_lot::Mutex;
use std::sync::Arc;
use tf_collective::Comm;
use tf_core::bf16;

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

/// Every rank's values (bits kept), rank `r` sending `sizes[r]`, which every rank knows, so none travel: one padded `all_gather` of [`Wire`] words.
pub(crate) fn gather_sized<T: Wire>(comm: &SharedComm, mine: Vec<T>, sizes: &[usize], what: &str) -> Vec<Vec<T>> {
    let max = sizes.iter().map(|n| n.div_ceil(T::PER_WORD)).max().unwrap_or(0);
    // Every rank computes the same sizes, so all skip together or all gather.
    if max == 0 {
        return vec![Vec::new(); sizes.len()];
    }
    let mut send = T::pack(&mine);
    send.resize(max, 0.0);
    let mut all = vec![0.0f32; max * sizes.len()];
    comm.with(|c| c.all_gather(&send, &mut all))
        .unwrap_or_else(|e| panic!("tensor parallel: gathering {what} failed: {e}"));
    all.chunks_exact(max).zip(sizes).map(|(words, &n)| T::unpack(words, n)).collect()
}

/// Every item's `dim` values in item order, item `i` sent by rank `owners[i]` (all ranks know every owner, so no sizes travel); `mine`: this rank's items in order.
pub fn gather_owned<T: Wire>(comm: &SharedComm, owners: &[usize], dim: usize, mine: Vec<T>) -> Vec<T> {
    let world = comm.world_size();
    let sizes: Vec<usize> = (0..world).map(|r| owners.iter().filter(|&&o| o == r).count() * dim).collect();
    let ranks = gather_sized(comm, mine, &sizes, "owned rows");
    let mut at = vec![0; world];
    let mut out = Vec::with_capacity(owners.len() * dim);
    for &r in owners {
        out.extend_from_slice(&ranks[r][at[r]..at[r] + dim]);
        at[r] += dim;
    }
    out
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
    let ranks = gather_sized(comm, mine.into_iter().flatten().collect(), &sizes, "expert outputs");
    let mut out = vec![Vec::new(); experts];
    for (part, got) in parts.iter().zip(ranks) {
        let mut at = 0;
        for e in part.clone() {
            let n = rows[e] * dim;
            out[e] = got[at..at + n].to_vec();
            at += n;
        }
    }
    out
}

/// Every row whole again from each rank's column share: rank `r` holds columns `parts[r]` (in units of `unit`) of all `rows`.
pub fn gather_cols<T: Wire + Default>(
    comm: &SharedComm,
    local: &[T],
    rows: usize,
    parts: &[std::ops::Range<usize>],
    unit: usize,
) -> Vec<T> {
    let width = parts.last().map_or(0, |p| p.end) * unit;
    let sizes: Vec<usize> = parts.iter().map(|p| p.len() * unit * rows).collect();
    let ranks = gather_sized(comm, local.to_vec(), &sizes, "column shares");
    let mut out = vec![T::default(); rows * width];
    for (part, got) in parts.iter().zip(ranks) {
        let n = part.len() * unit;
        for (row, src) in got.chunks_exact(n.max(1)).enumerate() {
            out[row * width + part.start * unit..row * width + part.end * unit].copy_from_slice(src);
        }
    }
    out
}
