//! Block quantizers of dsv41 §3.1 against a slow re-derivation from the spec's formulas.

mod common;
use proptest::prelude::*;
use tf_core::bf16;
use tf_core::formats::*;

fn bf(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

/// Spec scale for FP8 groups: 2^ceil(log2(max(amax, 1e-4) · f32(1/448))), via f64 logarithms.
fn spec_fp8_scale(g: &[bf16]) -> f32 {
    let amax = g.iter().map(|v| v.to_f32().abs()).fold(0.0, f32::max).max(1e-4);
    2f64.powi(((amax * (1.0f32 / 448.0)) as f64).log2().ceil() as i32) as f32
}

#[test]
fn fp8_known_group() {
    let mut g = vec![0.0f32; 32];
    g[0] = 448.0;
    g[1] = -1.0;
    g[2] = 1.0625;
    let q = quant_fp8_pow2(&bf(&g), 32);
    assert_eq!(q.scales, vec![1.0]);
    assert_eq!(q.codes[0], 0x7E);
    assert_eq!(q.codes[1], 0xB8);
    assert_eq!(q.codes[2], 0x38, "1.0625 ties to even 1.0");
    assert_eq!(q.scale_bytes(), vec![127]);
    g[0] = 450.0;
    let q = quant_fp8_pow2(&bf(&g), 32);
    assert_eq!(q.scales, vec![2.0], "amax just over 448 doubles the scale");
}

#[test]
fn fp8_all_zero_group_gets_the_floor_scale() {
    let q = quant_fp8_pow2(&bf(&[0.0; 32]), 32);
    assert_eq!(q.scales, vec![2f32.powi(-22)]);
    assert!(q.codes.iter().all(|&c| c == 0));
}

#[test]
fn fp4_e8m0_known_group() {
    let mut g = vec![0.0f32; 32];
    g[0] = 6.0;
    g[1] = 0.75;
    g[2] = -3.5;
    g[3] = 1.25;
    let q = quant_fp4(&bf(&g), 32, Fp4Scale::E8m0);
    assert_eq!(q.scale_bytes, vec![127]);
    let vals: Vec<f32> = (0..4).map(|i| q.value(i)).collect();
    assert_eq!(vals, vec![6.0, 1.0, -4.0, 1.0]);
    assert_eq!(q.packed[0], 0x7 | (0x2 << 4), "element 0 in the low nibble");
}

#[test]
fn fp4_e4m3_scale_is_amax_over_six_in_e4m3() {
    let mut g = vec![0.0f32; 16];
    g[0] = 7.0;
    g[5] = -2.0;
    let q = quant_fp4(&bf(&g), 16, Fp4Scale::E4m3);
    let want = e4m3_to_f32(f32_to_e4m3(7.0 / 6.0));
    assert_eq!(q.scale(0), want);
    assert_eq!(q.scale_bytes[0], f32_to_e4m3(7.0 / 6.0));
    assert_eq!(q.value(0), e2m1_to_f32(f32_to_e2m1(7.0 / want)) * want);
    let zero = quant_fp4(&bf(&[0.0; 16]), 16, Fp4Scale::E4m3);
    assert_eq!(zero.scale(0), 2f32.powi(-9), "amax floor 6·2^-9 gives the smallest subnormal scale");
}

#[test]
fn qdq_matches_quantize_then_decode() {
    let x: Vec<f32> = (0..64).map(|i| ((i * 37 % 29) as f32 - 14.0) * 0.173).collect();
    let xb = bf(&x);
    let q8 = quant_fp8_pow2(&xb, 32);
    let mut y = xb.clone();
    qdq_fp8_pow2(&mut y, 32);
    for (i, v) in y.iter().enumerate() {
        assert_eq!(*v, to_bf16(q8.value(i)));
    }
    for (kind, group) in [(Fp4Scale::E8m0, 32), (Fp4Scale::E4m3, 16)] {
        let q4 = quant_fp4(&xb, group, kind);
        let mut y = xb.clone();
        qdq_fp4(&mut y, group, kind);
        for (i, v) in y.iter().enumerate() {
            assert_eq!(*v, to_bf16(q4.value(i)), "{kind:?} element {i}");
        }
    }
}

fn group_strategy(len: usize) -> impl Strategy<Value = Vec<bf16>> {
    (proptest::collection::vec(-1f32..1f32, len), -20i32..20)
        .prop_map(|(v, e)| v.iter().map(|x| bf16::from_f32(x * 2f32.powi(e))).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    #[test]
    fn fp8_groups_match_spec(x in group_strategy(64)) {
        let q = quant_fp8_pow2(&x, 32);
        for (gi, g) in x.chunks(32).enumerate() {
            let s = spec_fp8_scale(g);
            prop_assert_eq!(q.scales[gi], s);
            for (j, v) in g.iter().enumerate() {
                let want = common::brute_nearest((v.to_f32() / s).clamp(-448.0, 448.0), e4m3_table(), 0x80);
                prop_assert_eq!(q.codes[gi * 32 + j], want);
            }
        }
    }

    #[test]
    fn fp4_e8m0_groups_match_spec(x in group_strategy(64)) {
        let q = quant_fp4(&x, 32, Fp4Scale::E8m0);
        for (gi, g) in x.chunks(32).enumerate() {
            let amax = g.iter().map(|v| v.to_f32().abs()).fold(0.0, f32::max).max(6.0 * 2f32.powi(-126));
            let s = 2f64.powi(((amax * (1.0f32 / 6.0)) as f64).log2().ceil() as i32) as f32;
            prop_assert_eq!(q.scale(gi), s);
            let codes = unpack_fp4(&q.packed);
            for (j, v) in g.iter().enumerate() {
                let want = common::brute_nearest((v.to_f32() / s).clamp(-6.0, 6.0), &E2M1_TABLE, 8);
                prop_assert_eq!(codes[gi * 32 + j], want);
            }
        }
    }

    #[test]
    fn fp4_e4m3_groups_match_spec(x in group_strategy(32)) {
        let q = quant_fp4(&x, 16, Fp4Scale::E4m3);
        let codes = unpack_fp4(&q.packed);
        for (gi, g) in x.chunks(16).enumerate() {
            let amax = g.iter().map(|v| v.to_f32().abs()).fold(0.0, f32::max).max(6.0 / 512.0);
            let s = e4m3_to_f32(common::brute_nearest((amax / 6.0).min(448.0), e4m3_table(), 0x80));
            prop_assert_eq!(q.scale(gi), s);
            for (j, v) in g.iter().enumerate() {
                let want = common::brute_nearest((v.to_f32() / s).clamp(-6.0, 6.0), &E2M1_TABLE, 8);
                prop_assert_eq!(codes[gi * 16 + j], want);
            }
        }
    }
}
