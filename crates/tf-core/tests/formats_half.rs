//! bf16 / f16 round-to-nearest-even, and E8M0 scales.

use proptest::prelude::*;
use tf_core::formats::*;

#[test]
fn bf16_ties_to_even() {
    assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3F80_8000)), 0x3F80, "halfway, even below");
    assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3F81_8000)), 0x3F82, "halfway, even above");
    assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3F80_8001)), 0x3F81, "just above halfway");
    assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7F7F_FFFF)), 0x7F80, "max f32 rounds to inf");
    assert!(bf16_bits_to_f32(f32_to_bf16_bits(f32::NAN)).is_nan());
    assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7F80_0001)) & 0x7FC0, 0x7FC0, "signalling NaN stays NaN");
    assert_eq!(round_bf16(1.0 + 1.0 / 256.0), 1.0);
}

#[test]
fn f16_stated_cases() {
    assert_eq!(f32_to_f16_bits(65504.0), 0x7BFF);
    assert_eq!(f32_to_f16_bits(65520.0), 0x7C00, "halfway past max rounds to inf");
    assert_eq!(f32_to_f16_bits(2f32.powi(-24)), 0x0001);
    assert_eq!(f32_to_f16_bits(2f32.powi(-25)), 0x0000, "tie to even zero");
    assert_eq!(f16_bits_to_f32(0x3C01), 1.0 + 2f32.powi(-10));
}

#[test]
fn e8m0_decodes_powers_of_two() {
    assert_eq!(e8m0_to_f32(127), 1.0);
    assert_eq!(e8m0_to_f32(128), 2.0);
    assert_eq!(e8m0_to_f32(1), 2f32.powi(-126));
    assert_eq!(e8m0_to_f32(0), 2f32.powi(-127));
    assert_eq!(e8m0_to_f32(254), 2f32.powi(127));
    assert!(e8m0_to_f32(255).is_nan());
    assert_eq!(f32_to_e8m0_ceil(1.0), 127);
    assert_eq!(f32_to_e8m0_ceil(1.5), 128);
    assert_eq!(f32_to_e8m0_ceil(0.0), E8M0_NAN);
    for b in 0..=254u8 {
        assert_eq!(f32_to_e8m0_ceil(e8m0_to_f32(b)), b);
    }
}

#[test]
fn fast_round_scale_is_the_ceiling_power_of_two() {
    let inv = 1.0f32 / 448.0;
    assert_eq!(fast_round_scale(448.0, inv), 1.0);
    assert_eq!(fast_round_scale(449.0, inv), 2.0);
    assert_eq!(fast_round_scale(224.0, inv), 0.5);
    assert_eq!(fast_round_scale(1e-4, inv), 2f32.powi(-22));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]
    #[test]
    fn bf16_matches_half(bits in any::<u32>()) {
        let x = f32::from_bits(bits);
        prop_assume!(!x.is_nan());
        prop_assert_eq!(f32_to_bf16_bits(x), half::bf16::from_f32(x).to_bits());
    }

    #[test]
    fn bf16_round_trip_exact(b in any::<u16>()) {
        let x = bf16_bits_to_f32(b);
        prop_assume!(!x.is_nan());
        prop_assert_eq!(f32_to_bf16_bits(x), b);
    }

    #[test]
    fn fast_round_scale_matches_log2_ceil(amax in 1e-4f32..1e6f32) {
        let inv = 1.0f32 / 448.0;
        let p = amax * inv;
        let want = 2f64.powi((p as f64).log2().ceil() as i32);
        prop_assert_eq!(fast_round_scale(amax, inv) as f64, want);
    }
}
