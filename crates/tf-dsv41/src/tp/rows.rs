//! Sequence-parallel rows (issue 25): a long call's replicated per-row work split over the ranks by rows, then gathered.

use super::ep::gather_sized;
use super::{SharedComm, partition};
use std::ops::Range;
use tf_core::bf16;

/// Values that travel through the f32 `all_gather` with their bits kept: an f32 a word, two bf16 a word (half the bytes).
pub trait Wire: Copy {
    /// Values one 32-bit word carries.
    const PER_WORD: usize;
    /// `vals` as words, the last one padded with zero bits.
    fn pack(vals: &[Self]) -> Vec<f32>;
    /// The first `n` values `words` carry.
    fn unpack(words: &[f32], n: usize) -> Vec<Self>;
}

impl Wire for f32 {
    const PER_WORD: usize = 1;
    fn pack(vals: &[f32]) -> Vec<f32> {
        vals.to_vec()
    }
    fn unpack(words: &[f32], n: usize) -> Vec<f32> {
        words[..n].to_vec()
    }
}

impl Wire for bf16 {
    const PER_WORD: usize = 2;
    fn pack(vals: &[bf16]) -> Vec<f32> {
        let word = |p: &[bf16]| u32::from(p[0].to_bits()) | u32::from(p.get(1).map_or(0, |b| b.to_bits())) << 16;
        vals.chunks(2).map(|p| f32::from_bits(word(p))).collect()
    }
    fn unpack(words: &[f32], n: usize) -> Vec<bf16> {
        let halves = words.iter().flat_map(|w| [w.to_bits() as u16, (w.to_bits() >> 16) as u16]);
        halves.take(n).map(bf16::from_bits).collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tp::SharedComm;
    use tf_collective::{Comm, CommError, InProcessComm};

    /// Odd lengths, ±0, a subnormal, infinities, a quiet and a signalling NaN with payloads: every bit pattern class.
    fn awkward() -> Vec<bf16> {
        [0x0000, 0x8000, 0x0001, 0x7F80, 0xFF80, 0x7FC1, 0x7F81, 0x3F80, 0xC2F7].map(bf16::from_bits).to_vec()
    }

    #[test]
    fn bf16_travels_two_a_word_with_every_bit_kept() {
        let v = awkward();
        let words = bf16::pack(&v);
        assert_eq!(words.len(), v.len().div_ceil(2), "two bf16 a word, the odd last one padded");
        let back = bf16::unpack(&words, v.len());
        assert_eq!(
            back.iter().map(|b| b.to_bits()).collect::<Vec<_>>(),
            v.iter().map(|b| b.to_bits()).collect::<Vec<_>>()
        );
        let f = [f32::from_bits(0x7F80_0001), -0.0, 1.5];
        assert_eq!(
            f32::unpack(&f32::pack(&f), 3).iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            [0x7F80_0001, 0x8000_0000, 0x3FC0_0000]
        );
    }

    /// Counts the f32 words each `all_gather` sends, then gathers through the in-process group.
    struct Counting(InProcessComm, std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl Comm for Counting {
        fn rank(&self) -> usize {
            self.0.rank()
        }
        fn world_size(&self) -> usize {
            self.0.world_size()
        }
        fn all_reduce_sum(&self, b: &mut [f32]) -> Result<(), CommError> {
            self.0.all_reduce_sum(b)
        }
        fn all_gather(&self, i: &[f32], o: &mut [f32]) -> Result<(), CommError> {
            self.1.fetch_add(i.len(), std::sync::atomic::Ordering::SeqCst);
            self.0.all_gather(i, o)
        }
        fn reduce_scatter_sum(&self, i: &[f32], o: &mut [f32]) -> Result<(), CommError> {
            self.0.reduce_scatter_sum(i, o)
        }
        fn broadcast(&self, b: &mut [f32], root: usize) -> Result<(), CommError> {
            self.0.broadcast(b, root)
        }
        fn broadcast_bytes(&self, b: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
            self.0.broadcast_bytes(b, root)
        }
        fn barrier(&self) -> Result<(), CommError> {
            self.0.barrier()
        }
        fn send(&self, b: &[f32], to: usize) -> Result<(), CommError> {
            self.0.send(b, to)
        }
        fn recv(&self, b: &mut [f32], from: usize) -> Result<(), CommError> {
            self.0.recv(b, from)
        }
        fn send_recv(&self, s: &[f32], to: usize, r: &mut [f32], from: usize) -> Result<(), CommError> {
            self.0.send_recv(s, to, r, from)
        }
    }

    #[test]
    fn gathered_rows_keep_their_bits_in_half_the_words() {
        let sizes = [5usize, 0, 9];
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ranks: Vec<_> =
            InProcessComm::group(3).into_iter().map(|c| SharedComm::new(Box::new(Counting(c, sent.clone())))).collect();
        let mine = |r: usize| awkward().into_iter().cycle().skip(r).take(sizes[r]).collect::<Vec<bf16>>();
        let got: Vec<Vec<Vec<bf16>>> = std::thread::scope(|s| {
            let hs: Vec<_> = ranks
                .iter()
                .enumerate()
                .map(|(r, c)| s.spawn(move || gather_sized(c, mine(r), &sizes, "test")))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let bits = |v: &[bf16]| v.iter().map(|b| b.to_bits()).collect::<Vec<_>>();
        for all in &got {
            for (r, part) in all.iter().enumerate() {
                assert_eq!(bits(part), bits(&mine(r)), "rank {r}'s rows, bit for bit");
            }
        }
        // Three ranks each send the widest share, 9 bf16 in 5 words (not 9 f32 words).
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 3 * 5);
    }
}
