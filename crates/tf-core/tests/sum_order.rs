//! `SumOrder`: the 32-lane contract and the sequential switch, against independent re-expressions.

use tf_core::ops::{SumOrder, sum_squares};
use tf_core::rng::SplitMix64;

/// Lane 0 after the xor fold, written as the recursion it unrolls: level m pairs lane l with lane l ^ m.
fn fold(lanes: &[f32; 32], l: usize, masks: &[usize]) -> f32 {
    match masks.split_last() {
        None => lanes[l],
        Some((&m, rest)) => fold(lanes, l, rest) + fold(lanes, l ^ m, rest),
    }
}

fn values(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n).map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 20) as f32 - 4.0).collect()
}

#[test]
fn lanes32_is_strided_lanes_then_the_xor_fold() {
    let mut rng = SplitMix64::new(3);
    for n in [1, 7, 31, 32, 33, 100, 5120, 20480] {
        let x = values(&mut rng, n);
        let lanes: [f32; 32] =
            std::array::from_fn(|lane| x.iter().skip(lane).step_by(32).fold(-0.0f32, |s, v| s + v * v));
        let want = fold(&lanes, 0, &[16, 8, 4, 2, 1]);
        assert_eq!(sum_squares(x.iter().copied(), SumOrder::Lanes32).to_bits(), want.to_bits(), "n = {n}");
    }
}

#[test]
fn sequential_is_index_order() {
    let mut rng = SplitMix64::new(4);
    let x = values(&mut rng, 5000);
    let mut s = -0.0f32;
    for v in &x {
        s += v * v;
    }
    assert_eq!(sum_squares(x.iter().copied(), SumOrder::Sequential).to_bits(), s.to_bits());
}

#[test]
fn both_orders_are_exact_on_small_integers_and_differ_on_rounding() {
    let ints: Vec<f32> = (0..1000).map(|i| (i % 17) as f32).collect();
    let exact: f32 = ints.iter().map(|v| v * v).sum();
    assert_eq!(sum_squares(ints.iter().copied(), SumOrder::Lanes32), exact);
    assert_eq!(sum_squares(ints.iter().copied(), SumOrder::Sequential), exact);
    // In index order 2^24 absorbs all 64 ones; in lanes only lane 0's two ones are lost (2^24 + 62 = 16,777,278).
    let mut x = vec![4096.0f32];
    x.extend(std::iter::repeat_n(1.0f32, 64));
    assert_eq!(sum_squares(x.iter().copied(), SumOrder::Sequential), 16_777_216.0);
    assert_eq!(sum_squares(x.iter().copied(), SumOrder::Lanes32), 16_777_278.0);
}
