//! The numpy port against numpy's own output (`tests/fixtures/numpy_multipliers.json`, made by `make_multipliers.py`).

use serde_json::Value;
use std::sync::OnceLock;
use tf_engram::multipliers::{multiplier_bound, multipliers_n};
use tf_engram::numpy_rng::{Pcg64, SeedSequence, int_to_words, integers_i64};
use tf_engram::{Multipliers, multipliers};

fn fixture() -> &'static Value {
    static F: OnceLock<Value> = OnceLock::new();
    F.get_or_init(|| serde_json::from_str(include_str!("fixtures/numpy_multipliers.json")).unwrap())
}

fn cases(key: &str) -> &'static [Value] {
    fixture()[key].as_array().unwrap()
}

fn hex(v: &Value) -> u128 {
    u128::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// A seed of any size as numpy's little-endian u32 words, since the fixture has seeds past u128.
fn seed_words(v: &Value) -> Vec<u32> {
    let digits = v.as_str().unwrap().trim_start_matches("0x").as_bytes();
    let words = digits.rchunks(8).map(|c| u32::from_str_radix(std::str::from_utf8(c).unwrap(), 16).unwrap());
    let mut words: Vec<u32> = words.collect();
    while words.len() > 1 && words.last() == Some(&0) {
        words.pop();
    }
    words
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn i64s(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

#[test]
fn fixture_records_its_numpy() {
    assert_eq!(fixture()["numpy_version"], "2.4.6");
    assert_eq!(int_to_words(0), [0]);
    assert_eq!(int_to_words((1 << 64) + 5), [5, 0, 1]);
    assert_eq!(seed_words(&Value::from("0x10000000000000005")), [5, 0, 1]);
    assert_eq!(SeedSequence::new(u128::MAX), SeedSequence::from_words(&[u32::MAX; 4]));
}

#[test]
fn seed_sequence_matches_numpy() {
    for case in cases("seed_sequence") {
        let seq = SeedSequence::from_words(&seed_words(&case["seed"]));
        let pool: Vec<u64> = seq.pool().iter().map(|&w| u64::from(w)).collect();
        assert_eq!(pool, u64s(&case["pool"]), "pool, seed {}", case["seed"]);
        let state: Vec<u64> = seq.generate_state_u32(9).into_iter().map(u64::from).collect();
        assert_eq!(state, u64s(&case["state_u32"]), "u32 state, seed {}", case["seed"]);
        assert_eq!(seq.generate_state_u64(4), u64s(&case["state_u64"]), "u64 state, seed {}", case["seed"]);
    }
}

#[test]
fn pcg64_seeding_and_raw_stream_match_numpy() {
    for case in cases("pcg64") {
        let mut bits = Pcg64::from_seed_sequence(&SeedSequence::from_words(&seed_words(&case["seed"])));
        assert_eq!(bits.state(), (hex(&case["state"]), hex(&case["inc"])), "state, seed {}", case["seed"]);
        let raw: Vec<u64> = (0..24).map(|_| bits.next_u64()).collect();
        assert_eq!(raw, u64s(&case["raw"]), "random_raw, seed {}", case["seed"]);
    }
}

#[test]
fn bounded_integers_match_numpy_and_consume_the_same_draws() {
    for case in cases("integers") {
        let mut bits = Pcg64::from_seed(u128::from(case["seed"].as_u64().unwrap()));
        let (low, high) = (case["low"].as_i64().unwrap(), case["high"].as_i64().unwrap());
        let endpoint = case["endpoint"].as_bool().unwrap();
        let out = integers_i64(&mut bits, low, high, endpoint, 40).unwrap();
        assert_eq!(out, i64s(&case["out"]), "{case}");
        assert_eq!(bits.next_u64(), case["next_raw"].as_u64().unwrap(), "position after {case}");
    }
    let mut bits = Pcg64::from_seed(0);
    assert_eq!(integers_i64(&mut bits, 3, 3, false, 1), None);
    assert_eq!(integers_i64(&mut bits, i64::MIN, i64::MIN, false, 1), None);
}

#[test]
fn every_fixture_multiplier_matches_numpy() {
    let all = cases("multipliers");
    assert!(all.len() > 800);
    for case in all {
        let (vocab, layer) = (case["vocab"].as_u64().unwrap() as u32, case["layer"].as_u64().unwrap() as usize);
        assert_eq!(multipliers(vocab, layer).to_vec(), i64s(&case["m"]), "vocab {vocab}, layer {layer}");
    }
    for case in cases("multipliers_6") {
        let (vocab, layer) = (case["vocab"].as_u64().unwrap() as u32, case["layer"].as_u64().unwrap() as usize);
        let six = multipliers_n(vocab, layer, 6);
        assert_eq!(six, i64s(&case["m"]), "vocab {vocab}, layer {layer}, size 6");
        assert_eq!(six[..4], multipliers(vocab, layer), "size 4 is a prefix");
    }
}

#[test]
fn the_formerly_precomputed_table_is_reproduced() {
    let known: [(u32, usize, Multipliers); 5] = [
        (99_092, 1, [76_632_096_046_245, 4_839_876_093_313, 35_959_672_319_349, 73_987_337_458_391]),
        (99_092, 2, [76_507_469_730_479, 37_097_805_264_573, 22_647_385_550_623, 71_424_551_940_645]),
        (99_092, 14, [67_716_810_739_261, 51_510_806_800_915, 30_921_347_202_721, 82_619_226_485_591]),
        (256, 1, [29_662_608_052_400_909, 1_873_410_163_432_121, 13_919_202_536_988_139, 28_638_879_857_136_817]),
        (256, 2, [29_614_367_931_768_699, 14_359_748_903_426_231, 8_766_307_535_087_495, 27_646_881_644_150_121]),
    ];
    for (vocab, layer, m) in known {
        assert_eq!(multipliers(vocab, layer), m, "vocab {vocab}, layer {layer}");
    }
}

#[test]
fn multipliers_are_odd_and_below_the_bound() {
    for vocab in [1, 2, 7, 256, 99_092, 129_280, (1 << 30) - 1, 1 << 30, u32::MAX] {
        let bound = multiplier_bound(vocab);
        for layer in (0..200).chain([12_345, usize::MAX]) {
            for m in multipliers_n(vocab, layer, 8) {
                assert!(m % 2 == 1 && m > 0 && m < 2 * bound, "vocab {vocab}, layer {layer}: {m}");
                assert!(m.checked_mul(i64::from(vocab)).is_some(), "vocab {vocab}, layer {layer}: {m}");
            }
        }
    }
}
