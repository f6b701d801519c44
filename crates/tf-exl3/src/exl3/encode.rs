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

/// Viterbi over edges (the low 16−K bits a state hands on); `start` pins the edge before position 0 and after 255.
fn viterbi(target: &[f32], k: usize, table: &[f32], start: Option<usize>) -> ([u16; TILE], f32) {
    let edges = 1usize << (16 - k);
    let mut cost = vec![0.0f32; edges];
    if let Some(e) = start {
        cost.iter_mut().enumerate().for_each(|(i, c)| *c = if i == e { 0.0 } else { f32::INFINITY });
    }
    // from[p][out_edge] = the symbol (high K bits of the state) that reached it best.
    let mut from = vec![0u8; TILE * edges];
    let mut next = vec![0.0f32; edges];
    for (p, &w) in target.iter().enumerate() {
        for (out, n) in next.iter_mut().enumerate() {
            let (mut best, mut arg) = (f32::INFINITY, 0u8);
            for hi in 0..1usize << k {
                let s = (hi << (16 - k)) | out;
                let d = table[s] - w;
                let c = cost[s >> k] + d * d;
                if c < best {
                    (best, arg) = (c, hi as u8);
                }
            }
            *n = best;
            from[p * edges + out] = arg;
        }
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
