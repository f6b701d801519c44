//! FP4 E2M1: the spec's rounding cases, nibble order, and a brute-force oracle.

mod common;
use proptest::prelude::*;
use tf_core::formats::{E2M1_TABLE, e2m1_to_f32, f32_to_e2m1, pack_fp4, unpack_fp4, unpack_fp4_f32};

#[test]
fn spec_rounding_cases() {
    let cases = [
        (0.25, 0.0),
        (0.75, 1.0),
        (1.25, 1.0),
        (1.75, 2.0),
        (2.5, 2.0),
        (3.5, 4.0),
        (5.0, 4.0),
        (5.5, 6.0),
        (7.0, 6.0),
        (100.0, 6.0),
        (0.3, 0.5),
        (-0.75, -1.0),
        (-5.0, -4.0),
    ];
    for (x, want) in cases {
        assert_eq!(e2m1_to_f32(f32_to_e2m1(x)), want, "{x}");
    }
}

#[test]
fn code_table_is_the_ocp_grid() {
    assert_eq!(E2M1_TABLE[..8], [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
    for c in 0..8 {
        assert_eq!(E2M1_TABLE[c + 8], -E2M1_TABLE[c]);
        assert_eq!(f32_to_e2m1(E2M1_TABLE[c]), c as u8);
    }
    assert_eq!(f32_to_e2m1(-0.1), 8, "negative values that round to zero are -0");
}

#[test]
fn low_nibble_holds_the_even_element() {
    assert_eq!(pack_fp4(&[0x1, 0x2, 0x3, 0xF]), vec![0x21, 0xF3]);
    assert_eq!(unpack_fp4(&[0x21]), vec![0x1, 0x2]);
    let mut out = [0.0; 4];
    unpack_fp4_f32(&[0x10, 0x32], &mut out);
    assert_eq!(out, [0.0, 0.5, 1.0, 1.5], "worked vector of quant.md §2.2 (scale 1)");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn matches_brute_force_nearest(x in -8f32..8f32) {
        let code = f32_to_e2m1(x);
        prop_assert_eq!(code, common::brute_nearest(x.clamp(-6.0, 6.0), &E2M1_TABLE, 8));
    }

    #[test]
    fn pack_round_trips(codes in proptest::collection::vec(0u8..16, 0..64usize).prop_map(|mut v| { if v.len() % 2 == 1 { v.pop(); } v })) {
        prop_assert_eq!(unpack_fp4(&pack_fp4(&codes)), codes);
    }

    #[test]
    fn monotone(a in -7f32..7f32, b in -7f32..7f32) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        prop_assert!(e2m1_to_f32(f32_to_e2m1(lo)) <= e2m1_to_f32(f32_to_e2m1(hi)));
    }
}
