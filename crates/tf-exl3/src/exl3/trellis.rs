//! An EXL3 tile's bitstream (quant.md §1.4–1.5): 256 K-bit symbols, MSB-first, in u32 words stored as swapped u16s.

/// Positions per 16×16 tile.
pub const TILE: usize = 256;
/// Bits of a trellis state.
const STATE_BITS: usize = 16;

/// Sequence position → `r·16 + c` in the tile (r = input offset, c = output offset): the mma B-fragment order.
pub fn tile_perm() -> [u8; TILE] {
    let mut perm = [0u8; TILE];
    for t in 0..32 {
        let (r0, c0) = (2 * (t % 4), t / 4);
        let cells = [
            (r0, c0),
            (r0 + 1, c0),
            (r0 + 8, c0),
            (r0 + 9, c0),
            (r0, c0 + 8),
            (r0 + 1, c0 + 8),
            (r0 + 8, c0 + 8),
            (r0 + 9, c0 + 8),
        ];
        for (j, (r, c)) in cells.into_iter().enumerate() {
            perm[8 * t + j] = (r * 16 + c) as u8;
        }
    }
    perm
}

/// The tile's `8K` u32 words: `u16[2m] | u16[2m+1] << 16`.
fn words(rec: &[u16]) -> Vec<u32> {
    rec.chunks_exact(2).map(|p| u32::from(p[0]) | u32::from(p[1]) << 16).collect()
}

/// Stream bit `b` (MSB-first within each u32 word).
fn bit(w: &[u32], b: usize) -> u32 {
    (w[b / 32] >> (31 - b % 32)) & 1
}

/// The state of position `p` read straight from the stream: the 16 bits ending at `(p+1)·K`, wrapping (tail-biting).
pub fn state_at(rec: &[u16], k: usize, p: usize) -> u16 {
    let w = words(rec);
    let len = TILE * k;
    let end = (p + 1) * k + len;
    (end - STATE_BITS..end).fold(0u32, |st, b| (st << 1) | bit(&w, b % len)) as u16
}

/// All 256 states of a tile record (`16K` u16s) by the recurrence `st = (st << K | v) & 0xFFFF`, primed by one lap.
pub fn tile_states(rec: &[u16], k: usize) -> [u16; TILE] {
    let w = words(rec);
    let sym = |p: usize| (0..k).fold(0u32, |v, i| (v << 1) | bit(&w, p * k + i));
    let mut st = 0u32;
    for p in 0..TILE {
        st = ((st << k) | sym(p)) & 0xFFFF;
    }
    let mut out = [0u16; TILE];
    for (p, o) in out.iter_mut().enumerate() {
        st = ((st << k) | sym(p)) & 0xFFFF;
        *o = st as u16;
    }
    out
}

/// The record (`16K` u16s, as stored) of 256 K-bit symbols; the inverse of the reading above.
pub fn pack_tile(symbols: &[u16], k: usize) -> Vec<u16> {
    assert_eq!(symbols.len(), TILE, "a tile holds {TILE} symbols");
    let mut w = vec![0u32; 8 * k];
    for (p, &v) in symbols.iter().enumerate() {
        for i in 0..k {
            let b = p * k + i;
            w[b / 32] |= ((u32::from(v) >> (k - 1 - i)) & 1) << (31 - b % 32);
        }
    }
    w.iter().flat_map(|&x| [x as u16, (x >> 16) as u16]).collect()
}

/// The K-bit symbols a record holds (the low K bits of each state).
pub fn unpack_tile(rec: &[u16], k: usize) -> Vec<u16> {
    let w = words(rec);
    (0..TILE).map(|p| (0..k).fold(0u32, |v, i| (v << 1) | bit(&w, p * k + i)) as u16).collect()
}
