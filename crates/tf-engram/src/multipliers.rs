//! Hash multipliers (spec §10.1 step 2): the reference's numpy draws, recomputed bit for bit by our port in `numpy_rng`.

use crate::numpy_rng::{Pcg64, integers_i64};

/// Multipliers per look-back (k = 0..3) for one engram layer and compressed vocab size.
pub type Multipliers = [i64; 4];

/// The seed the reference hands `numpy.random.default_rng` for an engram layer.
pub fn layer_seed(layer: usize) -> u128 {
    10_007 * layer as u128
}

/// The reference's multipliers of `layer` for a compressed vocab: `default_rng(10007·layer).integers(0, bound, 4)·2 + 1`.
pub fn multipliers(compressed_vocab: u32, layer: usize) -> Multipliers {
    let m = multipliers_n(compressed_vocab, layer, 4);
    [m[0], m[1], m[2], m[3]]
}

/// The first `n` multipliers; numpy draws one after another, so `multipliers` is a prefix of any longer row.
pub fn multipliers_n(compressed_vocab: u32, layer: usize, n: usize) -> Vec<i64> {
    let mut bits = Pcg64::from_seed(layer_seed(layer));
    let draws = integers_i64(&mut bits, 0, multiplier_bound(compressed_vocab), false, n);
    draws.expect("multiplier_bound is at least 1").into_iter().map(|x| x * 2 + 1).collect()
}

/// The reference's bound: every multiplier is odd and below `INT64_MAX / compressed_vocab`, so products fit in i64.
pub fn multiplier_bound(compressed_vocab: u32) -> i64 {
    ((i64::MAX / i64::from(compressed_vocab.max(1))) / 2).max(1)
}
