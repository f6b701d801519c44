//! Sequence-parallel rows (issue 25): a long call's replicated per-row work split over the ranks by rows, then gathered.

use super::ep::gather_sized;
use super::{SharedComm, partition};
use std::ops::Range;
use tf_core::bf16;
use tf_core::formats::to_bf16;

/// Values that travel through the f32 `all_gather` with their bits kept.
pub trait Wire: Copy {
    fn to_wire(self) -> f32;
    fn from_wire(v: f32) -> Self;
}

impl Wire for f32 {
    fn to_wire(self) -> f32 {
        self
    }
    fn from_wire(v: f32) -> f32 {
        v
    }
}

impl Wire for bf16 {
    fn to_wire(self) -> f32 {
        self.to_f32()
    }
    fn from_wire(v: f32) -> bf16 {
        to_bf16(v)
    }
}

/// Calls of at least `min_rows` rows run their row-local projections on this rank's rows only (`partition(rows, world)`).
#[derive(Clone, Debug)]
pub struct RowShare {
    pub comm: SharedComm,
    pub min_rows: usize,
}

impl RowShare {
    /// Whether a call of `rows` rows splits (else every rank runs all of them).
    pub fn splits(&self, rows: usize) -> bool {
        self.parts(rows).is_some()
    }

    /// Every rank's rows of a call of `rows`, or `None` where the call is too short to split.
    fn parts(&self, rows: usize) -> Option<Vec<Range<usize>>> {
        let world = self.comm.world_size();
        (world > 1 && rows >= self.min_rows.max(1)).then(|| partition(rows, world))
    }
}

/// `f(0..rows)`, each row `width` values; under a row share `f` runs on this rank's rows and every rank's rows are gathered.
pub fn by_rows<T: Wire>(
    sp: Option<&RowShare>,
    rows: usize,
    width: usize,
    f: impl FnOnce(Range<usize>) -> Vec<T>,
) -> Vec<T> {
    by_rows_sized(sp, rows, &|_| width, f)
}

/// [`by_rows`] of two outputs per row (`wa` and `wb` wide), interleaved per row only on the wire.
pub fn by_rows_pair<T: Wire>(
    sp: Option<&RowShare>,
    rows: usize,
    (wa, wb): (usize, usize),
    f: impl FnOnce(Range<usize>) -> (Vec<T>, Vec<T>),
) -> (Vec<T>, Vec<T>) {
    if !sp.is_some_and(|sp| sp.splits(rows)) {
        return f(0..rows);
    }
    let both = by_rows(sp, rows, wa + wb, |own| {
        let (a, b) = f(own);
        a.chunks_exact(wa.max(1)).zip(b.chunks_exact(wb.max(1))).flat_map(|(a, b)| a.iter().chain(b).copied()).collect()
    });
    let (mut a, mut b) = (Vec::with_capacity(rows * wa), Vec::with_capacity(rows * wb));
    for row in both.chunks_exact((wa + wb).max(1)) {
        a.extend_from_slice(&row[..wa]);
        b.extend_from_slice(&row[wa..]);
    }
    (a, b)
}

/// [`by_rows`] where row `r` has `size(r)` values (every rank computes the same sizes, so none travel).
pub fn by_rows_sized<T: Wire>(
    sp: Option<&RowShare>,
    rows: usize,
    size: &dyn Fn(usize) -> usize,
    f: impl FnOnce(Range<usize>) -> Vec<T>,
) -> Vec<T> {
    let Some((sp, parts)) = sp.and_then(|sp| sp.parts(rows).map(|p| (sp, p))) else { return f(0..rows) };
    let mine = parts[sp.comm.rank()].clone();
    let local = if mine.is_empty() { Vec::new() } else { f(mine) };
    let sizes: Vec<usize> = parts.iter().map(|p| p.clone().map(size).sum()).collect();
    assert_eq!(local.len(), sizes[sp.comm.rank()], "a row share's rows have the sizes every rank expects");
    gather_sized(&sp.comm, local, &sizes, "sequence-parallel rows").into_iter().flatten().collect()
}
