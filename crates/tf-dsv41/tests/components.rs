//! dsv41 components against their formulas, each test built to fail if a §20 pitfall is done the other way.

use tf_core::bf16;
use tf_core::formats::to_bf16;
use tf_dsv41::attn::{candidate_mask, sparse, top_k};
use tf_dsv41::mhc::{HcMix, hc_post, hc_pre, split_sinkhorn};
use tf_dsv41::moe::{route, swiglu};

fn bf(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| to_bf16(x)).collect()
}

#[test]
fn sinkhorn_comb_is_doubly_stochastic_and_pre_post_follow_the_formula() {
    let m: Vec<f32> = (0..24).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.3).collect();
    let base: Vec<f32> = (0..24).map(|i| (i as f32 - 12.0) * 0.05).collect();
    let mix = split_sinkhorn(&m, &[1.0, 0.9, 1.1], &base, 4, 20, 1e-6);
    for i in 0..4 {
        let row: f32 = (0..4).map(|j| mix.comb[i * 4 + j]).sum();
        let col: f32 = (0..4).map(|j| mix.comb[j * 4 + i]).sum();
        assert!((row - 1.0).abs() < 1e-3 && (col - 1.0).abs() < 1e-5, "row {row} col {col}");
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        assert_eq!(mix.pre[i], sig(m[i] * 1.0 + base[i]) + 1e-6);
        assert_eq!(mix.post[i], 2.0 * sig(m[4 + i] * 0.9 + base[4 + i]));
    }
}

#[test]
fn hc_post_contracts_the_first_comb_index() {
    let dim = 2;
    let x = bf(&[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    let mut comb = vec![0.0; 16];
    comb[1] = 0.5;
    let mix = HcMix { pre: vec![1.0; 4], post: vec![0.0; 4], comb };
    let out = hc_post(&bf(&[0.0, 0.0]), &x, &mix, dim);
    assert_eq!(out[2], to_bf16(0.5), "C[0][1]·X_0 lands in stream 1");
    assert_eq!(out[0], to_bf16(0.0), "not in stream 0 (the transposed reading)");
    let y = hc_pre(&bf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]), &[1.0, 0.0, 0.5, 0.0], 2);
    assert_eq!(y, bf(&[1.0 + 2.5, 2.0 + 3.0]));
}

#[test]
fn sink_joins_the_denominator_unscaled() {
    let q = [1.0f32, 2.0];
    let k = bf(&[0.5, 0.25]);
    let (scale, sink) = (0.5f32, 0.3f32);
    let mut out = [bf16::ZERO; 2];
    sparse::attend(&q, &[Some(&k)], sink, scale, &mut out);
    let s = (1.0 * 0.5 + 2.0 * 0.25) * scale;
    let p = (s - s).exp() / ((s - s).exp() + (sink - s).exp());
    assert_eq!(out[0], to_bf16(p * 0.5));
    let mut none = [bf16::ONE; 2];
    sparse::attend(&q, &[None, None], sink, scale, &mut none);
    assert_eq!(none, [bf16::ZERO; 2], "a row with no valid key gives zeros");
}

#[test]
fn top_k_prefers_lower_positions_on_ties_and_returns_ascending() {
    assert_eq!(top_k(&[0.0, 1.0, 1.0, 0.5, 1.0], 2), vec![1, 2]);
    assert_eq!(top_k(&[3.0, 0.0, 0.0, 5.0], 3), vec![0, 1, 3]);
    assert_eq!(top_k(&[f32::NEG_INFINITY, 2.0], 2), vec![0, 1]);
}

#[test]
fn candidate_blocks_pin_the_newest_and_keep_the_best() {
    let ninf = f32::NEG_INFINITY;
    let score = [9.0, 0.0, 1.0, 1.0, 5.0, 0.0, -3.0, -3.0, -9.0];
    let mask = candidate_mask(&score, 3, 2);
    assert_eq!(
        mask,
        [true, true, false, false, true, true, false, false, true],
        "blocks 0 and 2 by score, block 4 pinned"
    );
    let mask = candidate_mask(&score, 2, 2);
    assert_eq!(mask, [true, true, false, false, false, false, false, false, true], "the pinned block takes a slot");
    let mask = candidate_mask(&[ninf, ninf, 1.0], 3, 1);
    assert_eq!(mask, [false, false, true], "unreachable blocks are never kept");
}

#[test]
fn router_bias_picks_but_does_not_weigh() {
    let logits = [0.0f32, 2.0, 1.0, -1.0];
    let r = route(&logits, &[10.0, 0.0, 0.0, 0.0], 2, true, 1.5);
    assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1], "bias pulls expert 0 in");
    let sp = |x: f32| (x.exp().ln_1p()).sqrt();
    let (a, b) = (sp(0.0), sp(2.0));
    assert!((r[0].1 - a / (a + b + 1e-20) * 1.5).abs() < 1e-6, "weights from unbiased scores");
    let single = route(&logits, &[0.0; 4], 1, true, 1.5);
    assert!((single[0].1 - sp(2.0) * 1.5).abs() < 1e-6, "no normalisation with top-1");
}

#[test]
fn swiglu_clamps_up_both_ways_and_gate_from_above_then_weighs() {
    let g = bf(&[20.0, -20.0]);
    let u = bf(&[-30.0, 30.0]);
    let out = swiglu(&g, &u, Some(&[0.5]), 10.0);
    let silu = |x: f32| x / (1.0 + (-x).exp());
    assert_eq!(out[0], to_bf16(silu(10.0) * -10.0 * 0.5));
    assert_eq!(out[1], to_bf16(silu(-20.0) * 10.0 * 0.5), "gate is not clamped from below");
}

#[test]
fn compressor_pools_with_a_softmax_per_channel_and_rounds_to_bf16() {
    let open = vec![(vec![1.0f32, 1.0], vec![0.0f32, 2.0]), (vec![3.0f32, 3.0], vec![0.0f32, 0.0])];
    let out = tf_dsv41::attn::pool(&open, 2);
    assert_eq!(out[0], to_bf16(2.0), "equal gates average channel 0");
    let w = 1.0 / (1.0 + (-2.0f32).exp());
    assert_eq!(out[1], to_bf16(w * 1.0 + (1.0 - w) * 3.0), "channel 1 has its own softmax");
    assert_ne!(out[0], out[1]);
}
