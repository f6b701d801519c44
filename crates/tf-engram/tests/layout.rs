//! Bucket primes, offsets and multipliers against the figures of spec §10.1 and the released config.

use tf_engram::primes::{bucket_primes, is_prime, next_prime};
use tf_engram::{EngramConfig, EngramError, EngramLayout, multipliers};

fn tiny() -> EngramConfig {
    EngramConfig {
        layer_ids: vec![1, 2],
        num_embeddings: vec![630, 834],
        max_ngram_size: 4,
        vocab_size: 97,
        n_heads: 2,
        pad_id: 2,
        compressed_vocab_size: 256,
    }
}

#[test]
fn is_prime_agrees_with_a_sieve() {
    let n = 100_000;
    let mut sieve = vec![true; n];
    sieve[0] = false;
    sieve[1] = false;
    for i in 2..n {
        if sieve[i] {
            (i * i..n).step_by(i).for_each(|j| sieve[j] = false);
        }
    }
    for (i, &p) in sieve.iter().enumerate() {
        assert_eq!(is_prime(i as u64), p, "{i}");
    }
    assert!(is_prime(18_446_744_073_709_551_557), "largest u64 prime");
    assert!(!is_prime(3_215_031_751), "strong pseudoprime to bases 2, 3, 5, 7");
    assert_eq!(next_prime(u64::MAX - 59), Some(18_446_744_073_709_551_557));
    assert_eq!(next_prime(u64::MAX - 58), None);
}

#[test]
fn released_layout_reproduces_engram_num_embeddings() {
    let layout = EngramLayout::new(&EngramConfig::deepseek_v41_flash()).unwrap();
    assert_eq!(&layout.primes(0)[..3], &[16_000_057, 16_000_079, 16_000_081]);
    assert_eq!(layout.rows(0), 384_006_168);
    assert_eq!(layout.rows(1), 384_016_682);
    assert_eq!(layout.cols(), 24);
    assert_eq!(layout.layer_index(14), Some(1));
    let all: Vec<u64> = layout.primes(0).iter().chain(layout.primes(1)).copied().collect();
    assert!(all.windows(2).all(|w| w[0] < w[1]), "globally unique, increasing");
    assert_eq!(all, bucket_primes(16_000_000, 48).unwrap());
    let offsets = layout.offsets(1);
    assert_eq!(offsets[0], 0);
    assert_eq!(offsets[23] + layout.primes(1)[23], layout.rows(1));
}

#[test]
fn tiny_layout_matches_spec_section_18() {
    let layout = EngramLayout::new(&tiny()).unwrap();
    assert_eq!(layout.primes(0), &[97, 101, 103, 107, 109, 113]);
    assert_eq!(layout.primes(1), &[127, 131, 137, 139, 149, 151]);
    assert_eq!(layout.offsets(0), &[0, 97, 198, 301, 408, 517]);
    assert_eq!((layout.rows(0), layout.rows(1)), (630, 834));
}

#[test]
fn bad_configs_are_refused_with_the_reason() {
    let mut cfg = tiny();
    cfg.num_embeddings = vec![630, 835];
    let err = EngramLayout::new(&cfg).unwrap_err().to_string();
    assert!(err.contains("layer 2") && err.contains("835") && err.contains("834"), "{err}");
    let mut cfg = tiny();
    cfg.layer_ids = vec![1, 1];
    assert!(EngramLayout::new(&cfg).unwrap_err().to_string().contains("listed twice"));
    let mut cfg = tiny();
    cfg.max_ngram_size = 1;
    assert!(matches!(EngramLayout::new(&cfg), Err(EngramError::Config(_))));
}

#[test]
fn multipliers_are_the_spec_values_for_any_layer() {
    let l1 = [76_632_096_046_245, 4_839_876_093_313, 35_959_672_319_349, 73_987_337_458_391];
    let l14 = [67_716_810_739_261, 51_510_806_800_915, 30_921_347_202_721, 82_619_226_485_591];
    assert_eq!(multipliers(99_092, 1), l1);
    assert_eq!(multipliers(99_092, 14), l14);
    assert_ne!(multipliers(99_092, 3), multipliers(99_092, 1));
    assert_ne!(multipliers(256, 14), l14);
    let bound = tf_engram::multipliers::multiplier_bound(99_092);
    assert!(l1.iter().chain(&l14).all(|&m| m % 2 == 1 && m < 2 * bound));
}
