//! Hash ids: the spec's test vector, a direct formula oracle, chunking, DEAD tokens and rollback.

use proptest::prelude::*;
use std::sync::{Arc, OnceLock};
use tf_engram::{DEAD, EngramConfig, EngramError, NgramHasher, TokenMap, multipliers, multipliers_n};

fn v41() -> &'static NgramHasher {
    static H: OnceLock<NgramHasher> = OnceLock::new();
    H.get_or_init(|| {
        NgramHasher::new(&EngramConfig::deepseek_v41_flash(), Arc::new(TokenMap::deepseek_v4().unwrap())).unwrap()
    })
}

fn tiny() -> NgramHasher {
    let cfg = EngramConfig {
        layer_ids: vec![1, 2],
        num_embeddings: vec![630, 834],
        max_ngram_size: 4,
        vocab_size: 97,
        n_heads: 2,
        pad_id: 2,
        compressed_vocab_size: 256,
    };
    NgramHasher::new(&cfg, Arc::new(TokenMap::new((0..512).map(|t| t / 2).collect()).unwrap())).unwrap()
}

fn one_shot(h: &NgramHasher, seq: &[i64]) -> Vec<Vec<u64>> {
    let ids = h.hash_compressed(&mut h.history(), seq).unwrap();
    (0..h.layout().n_layers()).map(|l| ids.layer(l).to_vec()).collect()
}

fn oracle(h: &NgramHasher, seq: &[i64], l: usize) -> Vec<u64> {
    let (n, heads, m) = (h.layout().max_ngram_size(), h.layout().n_heads(), h.multipliers(l));
    let (primes, offsets) = (h.layout().primes(l), h.layout().offsets(l));
    let mut out = Vec::new();
    for p in 0..seq.len() {
        let reach = (0..n).take_while(|&k| k <= p && seq[p - k] != DEAD).count();
        let c: Vec<i64> = (0..n).map(|k| if k < reach { seq[p - k] } else { h.pad() }).collect();
        let mut r = c[0] * m[0];
        for k in 1..n {
            r ^= c[k] * m[k];
            out.extend(
                (0..heads).map(|j| (r % primes[(k - 1) * heads + j] as i64) as u64 + offsets[(k - 1) * heads + j]),
            );
        }
    }
    out
}

#[test]
fn spec_test_vector_layer_1() {
    let h = v41();
    assert_eq!(h.pad(), 2);
    let ids = h.hash_compressed(&mut h.history(), &[5, 17, 42, 99, 3]).unwrap();
    let at4 = ids.at(0, 4);
    assert_eq!(at4.len(), 24);
    assert_eq!(&at4[..4], &[5_668_755, 29_171_380, 44_399_032, 54_220_129]);
    assert_eq!(&at4[22..], &[356_484_764, 372_560_854]);
    assert!(ids.layer(1).iter().all(|&id| id < 384_016_682));
}

#[test]
fn raw_tokens_go_through_the_token_map() {
    let h = v41();
    let raw = [0u32, 15_000, 2, 129_279, 77];
    let compressed: Vec<i64> = raw.iter().map(|&t| i64::from(h.token_map().get(t).unwrap())).collect();
    let a = h.hash_tokens(&mut h.history(), &raw, None).unwrap();
    assert_eq!(a, h.hash_compressed(&mut h.history(), &compressed).unwrap());
    let err = h.hash_tokens(&mut h.history(), &[129_280], None).unwrap_err();
    assert!(matches!(err, EngramError::TokenOutOfRange { token: 129_280, .. }), "{err}");
}

#[test]
fn dead_tokens_stop_look_back_and_hash_as_pad() {
    let h = tiny();
    let seq = [10, 11, DEAD, 12, 13, 14, 15];
    let ids = one_shot(&h, &seq);
    for (l, layer) in ids.iter().enumerate() {
        assert_eq!(layer, &oracle(&h, &seq, l));
    }
    let pads = one_shot(&h, &[h.pad(); 4]);
    let cols = h.layout().cols();
    assert_eq!(ids[0][2 * cols..3 * cols], pads[0][3 * cols..], "a DEAD position hashes an all-pad n-gram");
    let fresh = one_shot(&h, &[12, 13, 14]);
    assert_eq!(ids[0][3 * cols..6 * cols], fresh[0][..], "after DEAD, hashing restarts as at the sequence start");
    assert_eq!(ids[0][6 * cols..], one_shot(&h, &[12, 13, 14, 15])[0][3 * cols..], "a full 4-gram after the DEAD");
    let live = [true, true, false, true, true, true, true];
    let raw: Vec<u32> = [20, 22, 24, 24, 26, 28, 30].to_vec();
    let via_mask = h.hash_tokens(&mut h.history(), &raw, Some(&live)).unwrap();
    assert_eq!(via_mask.layer(0), ids[0]);
    assert!(h.hash_tokens(&mut h.history(), &raw, Some(&live[..3])).is_err());
}

#[test]
fn invalid_compressed_ids_consume_nothing() {
    let h = tiny();
    let mut seq = h.history();
    let err = h.hash_compressed(&mut seq, &[1, 256]).unwrap_err();
    assert!(matches!(err, EngramError::CompressedOutOfRange { id: 256, classes: 256 }), "{err}");
    assert!(h.hash_compressed(&mut seq, &[-2]).is_err());
    assert_eq!(seq.position(), 0);
}

#[test]
fn rollback_is_bounded_and_errors_clearly() {
    let h = tiny();
    let mut seq = h.history_with_rollback(2);
    h.hash_compressed(&mut seq, &[1, 2]).unwrap();
    assert_eq!(seq.rollback_available(), 2);
    h.hash_compressed(&mut seq, &[3, 4, 5, 6]).unwrap();
    assert_eq!(seq.rollback_available(), 2);
    let err = seq.rollback(3).unwrap_err().to_string();
    assert!(err.contains("roll back 3") && err.contains("only 2"), "{err}");
    seq.rollback(2).unwrap();
    assert_eq!(seq.position(), 4);
    assert_eq!(seq.rollback_available(), 0);
}

#[test]
fn any_layer_loads_and_mismatched_vocab_is_refused() {
    let mut cfg = EngramConfig::deepseek_v41_flash();
    cfg.layer_ids = vec![1, 15];
    cfg.num_embeddings.clear();
    let map = Arc::new(TokenMap::deepseek_v4().unwrap());
    let h = NgramHasher::new(&cfg, map.clone()).unwrap();
    assert_eq!(h.multipliers(1), multipliers(99_092, 15));
    cfg.max_ngram_size = 6;
    let h = NgramHasher::new(&cfg, map.clone()).unwrap();
    assert_eq!(h.multipliers(0), multipliers_n(99_092, 1, 6));
    let mut cfg = EngramConfig::deepseek_v41_flash();
    cfg.compressed_vocab_size = 99_091;
    assert!(matches!(NgramHasher::new(&cfg, map.clone()), Err(EngramError::TokenMap(_))));
    let cfg = EngramConfig::deepseek_v41_flash();
    assert!(NgramHasher::with_multipliers(&cfg, map, vec![vec![1, 3, 5, i64::MAX], vec![1; 4]]).is_err());
}

fn sequences() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(prop_oneof![8 => 0i64..256, 1 => Just(DEAD)], 0..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn one_shot_matches_the_formula(seq in sequences()) {
        let h = tiny();
        let ids = one_shot(&h, &seq);
        for (l, layer) in ids.iter().enumerate() {
            prop_assert_eq!(layer, &oracle(&h, &seq, l));
        }
    }

    #[test]
    fn chunked_equals_one_shot(seq in sequences(), cuts in prop::collection::vec(0usize..40, 0..6)) {
        let h = tiny();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(seq.len())).collect();
        cuts.extend([0, seq.len()]);
        cuts.sort_unstable();
        let mut hist = h.history();
        let mut got = vec![Vec::new(); 2];
        for w in cuts.windows(2) {
            let ids = h.hash_compressed(&mut hist, &seq[w[0]..w[1]]).unwrap();
            (0..2).for_each(|l| got[l].extend_from_slice(ids.layer(l)));
        }
        prop_assert_eq!(got, one_shot(&h, &seq));
    }

    #[test]
    fn rollback_then_replay_equals_never_drafted(seq in sequences(), draft in sequences(), keep in 0usize..8) {
        let h = tiny();
        let draft = &draft[..draft.len().min(6)];
        let keep = keep.min(draft.len());
        let mut hist = h.history();
        h.hash_compressed(&mut hist, &seq).unwrap();
        let snapshot = hist.clone();
        h.hash_compressed(&mut hist, draft).unwrap();
        hist.rollback((draft.len() - keep) as u64).unwrap();
        let mut plain = snapshot;
        h.hash_compressed(&mut plain, &draft[..keep]).unwrap();
        prop_assert_eq!(hist.position(), plain.position());
        let next = [7, 8, 9];
        prop_assert_eq!(h.hash_compressed(&mut hist, &next).unwrap(), h.hash_compressed(&mut plain, &next).unwrap());
    }
}
