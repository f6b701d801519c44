//! FP8 E4M3FN: stated cases, exhaustive round trips, and a brute-force nearest-even oracle.

mod common;
use proptest::prelude::*;
use tf_core::formats::{E4M3_NAN, e4m3_table, e4m3_to_f32, f32_to_e4m3};

#[test]
fn stated_values_decode() {
    assert_eq!(e4m3_to_f32(0x7E), 448.0);
    assert_eq!(e4m3_to_f32(0xFE), -448.0);
    assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
    assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
    assert_eq!(e4m3_to_f32(0x38), 1.0);
    assert_eq!(e4m3_to_f32(0x39), 1.125);
    assert!(e4m3_to_f32(0x7F).is_nan() && e4m3_to_f32(0xFF).is_nan());
    assert!(e4m3_to_f32(0x80) == 0.0 && e4m3_to_f32(0x80).is_sign_negative());
}

#[test]
fn saturates_and_keeps_nan() {
    assert_eq!(f32_to_e4m3(448.0), 0x7E);
    assert_eq!(f32_to_e4m3(464.0), 0x7E, "tie between 448 and 480 goes to even 448");
    assert_eq!(f32_to_e4m3(470.0), 0x7E, "would round to 480, saturates");
    assert_eq!(f32_to_e4m3(1e30), 0x7E);
    assert_eq!(f32_to_e4m3(f32::INFINITY), 0x7E);
    assert_eq!(f32_to_e4m3(f32::NEG_INFINITY), 0xFE);
    assert_eq!(f32_to_e4m3(f32::NAN), E4M3_NAN);
}

#[test]
fn ties_go_to_even() {
    assert_eq!(f32_to_e4m3(1.0625), 0x38, "1 + 1/16 is halfway 1 and 1.125: even is 1");
    assert_eq!(f32_to_e4m3(1.1875), 0x3A, "halfway 1.125 and 1.25: even is 1.25");
    assert_eq!(f32_to_e4m3(2f32.powi(-10)), 0x00, "half the smallest subnormal rounds to 0");
    assert_eq!(f32_to_e4m3(3.0 * 2f32.powi(-10)), 0x02, "1.5 quanta rounds to 2");
    assert_eq!(f32_to_e4m3(-2f32.powi(-11)), 0x80, "tiny negatives keep their sign");
}

#[test]
fn every_code_round_trips() {
    for c in 0..=255u8 {
        let v = e4m3_to_f32(c);
        if v.is_nan() {
            continue;
        }
        assert_eq!(f32_to_e4m3(v), c, "code {c:#04x} value {v}");
    }
}

#[test]
fn every_midpoint_rounds_to_even_neighbour() {
    let t = e4m3_table();
    for c in 0..0x7Eu8 {
        let mid = (t[c as usize] + t[c as usize + 1]) / 2.0;
        let want = if c & 1 == 0 { c } else { c + 1 };
        assert_eq!(f32_to_e4m3(mid), want, "midpoint {mid} of codes {c:#x},{:#x}", c + 1);
        assert_eq!(f32_to_e4m3(-mid), want | 0x80);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]
    #[test]
    fn matches_brute_force_nearest(x in -500f32..500f32) {
        prop_assert_eq!(f32_to_e4m3(x), common::brute_nearest(x.clamp(-448.0, 448.0), e4m3_table(), 0x80));
    }

    #[test]
    fn matches_brute_force_on_small_values(x in -0.05f32..0.05f32) {
        prop_assert_eq!(f32_to_e4m3(x), common::brute_nearest(x, e4m3_table(), 0x80));
    }

    #[test]
    fn monotone(a in -600f32..600f32, b in -600f32..600f32) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        prop_assert!(e4m3_to_f32(f32_to_e4m3(lo)) <= e4m3_to_f32(f32_to_e4m3(hi)));
    }
}
