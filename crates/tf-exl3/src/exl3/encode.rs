//! Making EXL3 weights (quant.md §1.9): random streams for format tests, and the fallback quantizer for small models.

use super::codebook::Codebook;
use super::trellis::{TILE, pack_tile, tile_perm};
use super::weight::{Exl3Weight, HAD, fwht_blocks};
use rayon::prelude::*;
use tf_core::formats::{f16_bits_to_f32, f32_to_f16_bits};
use tf_core::rng::SplitMix64;

/// States of the 16-bit trellis.
const STATES: usize = 1 << 16;

/// `codebook`'s 65,536 values as f32, indexed by state.
pub fn codebook_table(codebook: Codebook) -> Vec<f32> {
    (0..STATES).map(|s| codebook.value(s as u16)).collect()
}

/// The cheapest tail-biting path for 256 targets: the states (whose low K bits are the symbols) and its squared error.
pub fn encode_tile(target: &[f32; TILE], k: usize, table: &[f32]) -> ([u16; TILE], f32) {
    // Pass 1 on the sequence rotated by half a tile finds the edge the path crosses at position 0.
    let rotated: Vec<f32> = (0..TILE).map(|p| target[(p + TILE / 2) % TILE]).collect();
    let (states, _) = viterbi(&rotated, k, table, None);
    let edge = usize::from(states[TILE / 2 - 1]) & ((1 << (16 - k)) - 1);
    // Pass 2 starts from that edge and must end on it, so the stream wraps.
    viterbi(target, k, table, Some(edge))
}

/// [`viterbi_body`] compiled for AVX2 where the CPU has it (3 to 10× faster: its compare-and-select runs in lanes); same bits.
fn viterbi(target: &[f32], k: usize, table: &[f32], start: Option<usize>) -> ([u16; TILE], f32) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        return unsafe { viterbi_avx2(target, k, table, start) };
    }
    viterbi_body(target, k, table, start)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn viterbi_avx2(target: &[f32], k: usize, table: &[f32], start: Option<usize>) -> ([u16; TILE], f32) {
    viterbi_body(target, k, table, start)
}

/// Viterbi over edges (the low 16−K bits a state hands on); `start` pins the edge before position 0 and after 255.
#[inline(always)]
fn viterbi_body(target: &[f32], k: usize, table: &[f32], start: Option<usize>) -> ([u16; TILE], f32) {
    let edges = 1usize << (16 - k);
    let mut cost = vec![0.0f32; edges];
    if let Some(e) = start {
        cost.iter_mut().enumerate().for_each(|(i, c)| *c = if i == e { 0.0 } else { f32::INFINITY });
    }
    // from[p][out_edge] = the symbol (high K bits of the state) that reached it best.
    let mut from = vec![0u8; TILE * edges];
    let mut next = vec![0.0f32; edges];
    // The best symbol per edge in 32 bits while a position runs, so cost and symbol move in lanes of one width.
    let mut best = vec![0u32; edges];
    assert!((1..=8).contains(&k), "EXL3 symbols are 1 to 8 bits, not {k}");
    for (p, &w) in target.iter().enumerate() {
        next.fill(f32::INFINITY);
        best.fill(0);
        // Symbols ascending with a strict `<` per edge: the first cheapest symbol wins, as a scalar scan picks it.
        for hi in 0..1usize << k {
            let (tab, base) = (&table[hi << (16 - k)..(hi + 1) << (16 - k)], hi << (16 - 2 * k));
            let sources = &cost[base..base + (1 << (16 - 2 * k))];
            match k {
                1 => relax::<2>(&mut next, &mut best, tab, sources, w, hi as u32),
                2 => relax::<4>(&mut next, &mut best, tab, sources, w, hi as u32),
                3 => relax::<8>(&mut next, &mut best, tab, sources, w, hi as u32),
                4 => relax::<16>(&mut next, &mut best, tab, sources, w, hi as u32),
                5 => relax::<32>(&mut next, &mut best, tab, sources, w, hi as u32),
                6 => relax::<64>(&mut next, &mut best, tab, sources, w, hi as u32),
                7 => relax::<128>(&mut next, &mut best, tab, sources, w, hi as u32),
                _ => relax::<256>(&mut next, &mut best, tab, sources, w, hi as u32),
            }
        }
        from[p * edges..(p + 1) * edges].iter_mut().zip(&best).for_each(|(f, &b)| *f = b as u8);
        std::mem::swap(&mut cost, &mut next);
    }
    let mut edge = match start {
        Some(e) => e,
        None => (0..edges).fold(0, |b, e| if cost[e] < cost[b] { e } else { b }),
    };
    let total = cost[edge];
    let mut states = [0u16; TILE];
    for p in (0..TILE).rev() {
        let s = (usize::from(from[p * edges + edge]) << (16 - k)) | edge;
        states[p] = s as u16;
        edge = s >> k;
    }
    (states, total)
}

/// One symbol's step into every edge: edge `out` comes from `sources[out / W]` (W = 2^K), kept where it is cheaper.
#[inline(always)]
fn relax<const W: usize>(next: &mut [f32], best: &mut [u32], tab: &[f32], sources: &[f32], w: f32, hi: u32) {
    // Lanes of 32 edges whatever K, so short runs (K of 1 to 4) still fill whole vectors.
    let lanes = next.chunks_exact_mut(32).zip(best.chunks_exact_mut(32)).zip(tab.chunks_exact(32));
    for (j, ((n, a), t)) in lanes.enumerate() {
        let (n, a, t): (&mut [f32; 32], &mut [u32; 32], &[f32; 32]) =
            (n.try_into().unwrap(), a.try_into().unwrap(), t.try_into().unwrap());
        let from: [f32; 32] = if W >= 32 {
            [sources[32 * j / W]; 32]
        } else {
            let s = &sources[j * (32 / W)..(j + 1) * (32 / W)];
            std::array::from_fn(|i| s[i / W])
        };
        for i in 0..32 {
            let d = t[i] - w;
            let c = from[i] + d * d;
            let better = c < n[i];
            n[i] = if better { c } else { n[i] };
            a[i] = if better { hi } else { a[i] };
        }
    }
}

/// A weight with random bitstreams (any is a valid path) and random signed scales: for loader and kernel tests.
pub fn random_weight(
    rng: &mut SplitMix64,
    (in_p, out_p, k): (usize, usize, usize),
    codebook: Codebook,
    scale: f32,
) -> Exl3Weight {
    let trellis = (0..in_p / 16 * out_p / 16 * 16 * k).map(|_| rng.next_u64() as u16).collect();
    let mut signed = |n: usize, s: f32| -> Vec<u16> {
        (0..n)
            .map(|_| {
                let m = 0.5 + 1.5 * (rng.next_u64() >> 11) as f32 / (1u64 << 53) as f32;
                f32_to_f16_bits(if rng.next_u64() & 1 == 0 { m * s } else { -m * s })
            })
            .collect()
    };
    let (suh, svh) = (signed(in_p, scale), signed(out_p, 1.0));
    Exl3Weight { in_p, out_p, k, codebook, trellis, suh, svh, bias: None }
}

/// RMS of each row (`by_row`) or each column of `w [n, m]`.
fn block_rms(w: &[f32], (n, m): (usize, usize), by_row: bool) -> Vec<f32> {
    let count = if by_row { n } else { m };
    (0..count)
        .map(|i| {
            let vals: Vec<f32> =
                if by_row { w[i * m..(i + 1) * m].to_vec() } else { (0..n).map(|r| w[r * m + i]).collect() };
            (vals.iter().map(|v| v * v).sum::<f32>() / vals.len() as f32).sqrt().max(1e-10)
        })
        .collect()
}

/// Quantizes `w [in_p, out_p]` (HF's weight.T, dims multiples of 128) as upstream's calibration-free fallback: signs, Hadamards, RMS scales in `suh`, a Viterbi per tile.
pub fn quantize(w: &[f32], (in_p, out_p): (usize, usize), k: usize, codebook: Codebook, seed: u64) -> Exl3Weight {
    assert!(
        in_p % HAD == 0 && out_p % HAD == 0 && w.len() == in_p * out_p,
        "quantize: {in_p}×{out_p} must be multiples of {HAD}"
    );
    let mut rng = SplitMix64::new(seed);
    let table = codebook_table(codebook);
    let std = {
        let m = table.iter().map(|&v| f64::from(v)).sum::<f64>() / STATES as f64;
        (table.iter().map(|&v| (f64::from(v) - m).powi(2)).sum::<f64>() / STATES as f64).sqrt() as f32
    };
    let mut r = w.to_vec();
    // Output side: signs only (no output scales), then the Hadamard along each row.
    let sv: Vec<f32> = (0..out_p).map(|_| if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 }).collect();
    for row in r.chunks_exact_mut(out_p) {
        row.iter_mut().zip(&sv).for_each(|(v, s)| *v *= s);
        fwht_blocks(row);
    }
    // Input side: random signs times each row's RMS over the codebook's std (rounded to the stored fp16), then H on columns.
    let rms = block_rms(&r, (in_p, out_p), true);
    let suh: Vec<u16> =
        rms.iter().map(|&s| f32_to_f16_bits(if rng.next_u64() & 1 == 0 { s / std } else { -s / std })).collect();
    for (row, &s) in r.chunks_exact_mut(out_p).zip(&suh) {
        let s = f16_bits_to_f32(s);
        row.iter_mut().for_each(|v| *v /= s);
    }
    let mut col = vec![0.0f32; in_p];
    for j in 0..out_p {
        (0..in_p).for_each(|i| col[i] = r[i * out_p + j]);
        fwht_blocks(&mut col);
        (0..in_p).for_each(|i| r[i * out_p + j] = col[i]);
    }
    let svh = sv.iter().map(|&s| f32_to_f16_bits(s)).collect();
    let mut out = Exl3Weight { in_p, out_p, k, codebook, trellis: Vec::new(), suh, svh, bias: None };
    let perm = tile_perm();
    let (tk, tn) = (in_p / 16, out_p / 16);
    // Tiles encode independently, so they run in parallel; the result does not depend on the thread count.
    let records: Vec<Vec<u16>> = (0..tk * tn)
        .into_par_iter()
        .map(|t| {
            let (r0, c0) = (16 * (t / tn), 16 * (t % tn));
            let mut target = [0.0f32; TILE];
            for (p, v) in target.iter_mut().enumerate() {
                *v = r[(r0 + usize::from(perm[p]) / 16) * out_p + c0 + usize::from(perm[p]) % 16];
            }
            let (states, _) = encode_tile(&target, k, &table);
            let symbols: Vec<u16> = states.iter().map(|&s| s & ((1 << k) - 1) as u16).collect();
            pack_tile(&symbols, k)
        })
        .collect();
    out.trellis = records.concat();
    out
}
