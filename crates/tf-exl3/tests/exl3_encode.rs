//! The EXL3 encoder: a decodable path comes back exactly, and the fallback quantizer reconstructs a matrix.

use tf_core::rng::SplitMix64;
use tf_exl3::exl3::Codebook;
use tf_exl3::exl3::encode::{codebook_table, encode_tile, quantize};
use tf_exl3::exl3::trellis::{TILE, pack_tile, tile_states};

#[test]
fn a_decodable_path_encodes_back_exactly_and_wraps() {
    let mut rng = SplitMix64::new(11);
    for (k, cb) in
        [(1, Codebook::Inst3), (2, Codebook::Mcg), (3, Codebook::Mul1), (4, Codebook::Inst3), (8, Codebook::Mul1)]
    {
        let table = codebook_table(cb);
        let rec: Vec<u16> = (0..16 * k).map(|_| rng.next_u64() as u16).collect();
        let mut target = [0.0f32; TILE];
        for (t, s) in target.iter_mut().zip(tile_states(&rec, k)) {
            *t = table[usize::from(s)];
        }
        let (states, err) = encode_tile(&target, k, &table);
        assert_eq!(err, 0.0, "K {k} {cb:?}: the stored path itself costs nothing");
        // The symbols alone, packed, must read back as the same states: the path bites its own tail.
        let symbols: Vec<u16> = states.iter().map(|&s| s & ((1 << k) - 1) as u16).collect();
        let again = tile_states(&pack_tile(&symbols, k), k);
        assert_eq!(again, states, "K {k} {cb:?}");
        assert!(again.iter().zip(&target).all(|(&s, &t)| table[usize::from(s)] == t));
    }
}

/// `‖W_eff − W‖ / ‖W‖` after quantizing a random Gaussian `W` at K bits.
fn relative_error(k: usize, cb: Codebook) -> f64 {
    let mut rng = SplitMix64::new(5);
    let (n, m) = (128, 128);
    let w: Vec<f32> = (0..n * m).map(|_| rng.normal() * 0.02).collect();
    let q = quantize(&w, (n, m), k, cb, 9);
    let back = q.weight();
    let num: f64 = back.iter().zip(&w).map(|(a, b)| f64::from(a - b).powi(2)).sum();
    let den: f64 = w.iter().map(|v| f64::from(*v).powi(2)).sum();
    (num / den).sqrt()
}

#[test]
fn the_fallback_quantizer_reconstructs_a_matrix_better_with_more_bits() {
    // Declared before measuring, from QTIP's distortion for a Gaussian source (2 bits ≈ 0.26, 4 bits ≈ 0.07) with slack.
    let (e2, e4) = (relative_error(2, Codebook::Mul1), relative_error(4, Codebook::Inst3));
    eprintln!("relative error: K=2 {e2:.4}, K=4 {e4:.4}");
    assert!(e2 < 0.35 && e4 < 0.12 && e4 < e2, "K=2 {e2}, K=4 {e4}");
}

/// The trellis search by its definition, one state at a time: the cheapest path's states and cost (first cheapest symbol on ties).
fn scalar_viterbi(target: &[f32], k: usize, table: &[f32], start: Option<usize>) -> (Vec<u16>, f32) {
    let edges = 1usize << (16 - k);
    let mut cost: Vec<f32> =
        (0..edges).map(|e| if start.is_none_or(|s| s == e) { 0.0 } else { f32::INFINITY }).collect();
    let mut from = vec![vec![0usize; edges]; target.len()];
    for (p, &w) in target.iter().enumerate() {
        let mut next = vec![f32::INFINITY; edges];
        for (out, n) in next.iter_mut().enumerate() {
            for hi in 0..1usize << k {
                let s = (hi << (16 - k)) | out;
                let c = cost[s >> k] + (table[s] - w) * (table[s] - w);
                if c < *n {
                    (*n, from[p][out]) = (c, hi);
                }
            }
        }
        cost = next;
    }
    let mut edge = start.unwrap_or_else(|| (0..edges).fold(0, |b, e| if cost[e] < cost[b] { e } else { b }));
    let total = cost[edge];
    let mut states = vec![0u16; target.len()];
    for p in (0..target.len()).rev() {
        let s = (from[p][edge] << (16 - k)) | edge;
        states[p] = s as u16;
        edge = s >> k;
    }
    (states, total)
}

#[test]
fn the_lane_search_finds_the_scalar_searchs_path_bit_for_bit() {
    let mut rng = SplitMix64::new(23);
    for (k, cb) in [
        (1, Codebook::Mul1),
        (2, Codebook::Mcg),
        (3, Codebook::Mul1),
        (4, Codebook::Inst3),
        (5, Codebook::Mul1),
        (8, Codebook::Mcg),
    ] {
        let table = codebook_table(cb);
        let mut target = [0.0f32; TILE];
        target.iter_mut().for_each(|t| *t = rng.normal());
        // Repeated and zero targets make equal-cost paths, so the tie rule is checked too.
        (target[7], target[8], target[9]) = (0.0, target[3], target[3]);
        let rotated: Vec<f32> = (0..TILE).map(|p| target[(p + TILE / 2) % TILE]).collect();
        let (first, _) = scalar_viterbi(&rotated, k, &table, None);
        let edge = usize::from(first[TILE / 2 - 1]) & ((1 << (16 - k)) - 1);
        let (want, want_err) = scalar_viterbi(&target, k, &table, Some(edge));
        let (got, err) = encode_tile(&target, k, &table);
        assert_eq!(got.to_vec(), want, "K {k} {cb:?}");
        assert_eq!(err.to_bits(), want_err.to_bits(), "K {k} {cb:?}");
    }
}
