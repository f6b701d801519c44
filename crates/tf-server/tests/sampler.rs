//! The sampler over any temperature, top-p and top-k: always a finite distribution's token, never a NaN path.

use proptest::prelude::*;
use tf_server::lanes::{Rng, SamplingParams, argmax, biased, sample};

fn logits() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-60.0f32..60.0, 2..300)
}

proptest! {
    #[test]
    fn a_sampled_token_is_one_the_filters_keep(
        l in logits(),
        t in prop_oneof![Just(1e-45f32), Just(f32::MIN_POSITIVE), 1e-30f32..1e-3, 1e-3f32..2.0],
        top_p in prop_oneof![Just(1.0f32), 1e-6f32..1.0],
        top_k in 0usize..8,
        seed in any::<u64>(),
    ) {
        let p = SamplingParams { temperature: t, top_k, top_p, seed };
        let id = sample(&l, &p, &mut Rng::new(seed)) as usize;
        prop_assert!(id < l.len());
        let better = l.iter().filter(|&&x| x > l[id]).count();
        if top_k > 0 {
            prop_assert!(better < top_k, "token {} ranks past top_k {}", id, top_k);
        }
        let m = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if t < 1e-30 {
            prop_assert_eq!(l[id], m, "a vanishing temperature samples a greedy token");
        }
        if top_p < 1e-6 {
            prop_assert_eq!(l[id], m, "a vanishing top_p keeps only the best token");
        }
    }

    #[test]
    fn one_seed_gives_one_token(l in logits(), t in 1e-40f32..2.0, seed in any::<u64>()) {
        let p = SamplingParams { temperature: t, top_k: 0, top_p: 0.9, seed };
        prop_assert_eq!(sample(&l, &p, &mut Rng::new(seed)), sample(&l, &p, &mut Rng::new(seed)));
    }
}

#[test]
fn a_tiny_temperature_is_greedy_where_the_old_sampler_gave_the_last_id() {
    let l: Vec<f32> = (0..129_280).map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
    let p = SamplingParams { temperature: 1e-45, top_k: 0, top_p: 1.0, seed: 1 };
    let best = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for seed in 0..20 {
        let id = sample(&l, &p, &mut Rng::new(seed));
        assert_eq!(l[id as usize], best, "seed {seed}: {id}");
    }
    assert_ne!(argmax(&l), 129_279);
}

#[test]
fn a_bias_adds_to_its_ids_only() {
    let out = biased(&[1.0, 2.0, 3.0], &[(0, 100.0), (2, -0.5), (9, 1.0)]);
    assert_eq!(out, vec![101.0, 2.0, 2.5]);
}
