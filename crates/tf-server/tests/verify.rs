//! Speculative verification: greedy keeps exactly the plain greedy tokens; sampled keeps the target's distribution (chi-square).

use proptest::prelude::*;
use tf_server::lanes::verify::{DraftDist, accept};
use tf_server::lanes::{Rng, SamplingParams, argmax, distribution, draw};

/// The chi-square bound for 4 degrees of freedom at p = 0.001, fixed before any run: 5 ids, so a wrong rule fails by far.
const CHI2_DF4_P001: f64 = 18.467;

fn chi2(counts: &[u64], probs: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts.iter().zip(probs).map(|(&c, &p)| (c as f64 - n as f64 * p).powi(2) / (n as f64 * p)).sum()
}

fn probs(logits: &[f32], p: &SamplingParams) -> Vec<f64> {
    let d = distribution(logits, p);
    let total: f64 = d.iter().map(|x| x.1).sum();
    (0..logits.len() as u32).map(|id| d.iter().find(|x| x.0 == id).map_or(0.0, |x| x.1 / total)).collect()
}

proptest! {
    #[test]
    fn greedy_keeps_the_agreed_prefix_then_the_targets_token(
        rows in prop::collection::vec(prop::collection::vec(-8.0f32..8.0, 6), 1..6),
        agree in 0usize..6,
    ) {
        let k = rows.len() - 1;
        let plain: Vec<u32> = rows.iter().map(|r| argmax(r)).collect();
        // The first `agree` drafts are the target's own tokens, the next one (if any) another id.
        let drafts: Vec<u32> = (0..k).map(|i| if i < agree { plain[i] } else { (plain[i] + 1) % 6 }).collect();
        let out = accept(&rows, &drafts, &vec![None; k], &SamplingParams::default(), &mut Rng::new(0));
        let kept = agree.min(k);
        prop_assert_eq!(&out[..], &plain[..=kept], "drafted == plain: the target's tokens up to the first disagreement");
    }
}

#[test]
fn a_greedy_drafter_leaves_the_first_token_distributed_as_the_target() {
    let p = SamplingParams { temperature: 1.0, ..SamplingParams::default() };
    let rows = vec![vec![2.0f32, 1.0, 0.5, 0.0, -1.0], vec![0.0, 0.3, 1.5, -0.5, 0.2]];
    let mut counts = [0u64; 5];
    for seed in 0..20_000 {
        // The drafter always proposes id 1, the target's second choice: half the time it must be rejected.
        counts[accept(&rows, &[1], &[None], &p, &mut Rng::new(seed))[0] as usize] += 1;
    }
    let x = chi2(&counts, &probs(&rows[0], &p));
    assert!(x < CHI2_DF4_P001, "chi-square {x:.2} over {counts:?}");
}

#[test]
fn a_sampling_drafter_leaves_both_tokens_distributed_as_the_target() {
    let p = SamplingParams { temperature: 0.8, top_k: 0, top_p: 1.0, seed: 0 };
    let rows = vec![vec![1.0f32, 0.2, 0.9, -0.3, 0.0], vec![-1.0, 0.5, 0.0, 1.2, 0.1], vec![0.0; 5]];
    let q0: Vec<(u32, f64)> = vec![(0, 0.1), (1, 0.5), (2, 0.2), (3, 0.1), (4, 0.1)];
    let q1: Vec<(u32, f64)> = vec![(0, 0.3), (1, 0.1), (2, 0.1), (3, 0.1), (4, 0.4)];
    let (mut first, mut second) = ([0u64; 5], [0u64; 5]);
    let mut drafter = Rng::new(u64::MAX);
    for seed in 0..20_000 {
        let drafts = [draw(&q0, &mut drafter), draw(&q1, &mut drafter)];
        let q: Vec<DraftDist> = vec![Some(q0.clone()), Some(q1.clone())];
        let out = accept(&rows, &drafts, &q, &p, &mut Rng::new(seed));
        first[out[0] as usize] += 1;
        // Row 1 is the target's distribution after the first draft, so only a window that kept it shows it.
        if out.len() > 1 && out[0] == drafts[0] && drafts[0] == 1 {
            second[out[1] as usize] += 1;
        }
    }
    let x = chi2(&first, &probs(&rows[0], &p));
    assert!(x < CHI2_DF4_P001, "first token: chi-square {x:.2} over {first:?}");
    assert!(second.iter().sum::<u64>() > 2_000, "{second:?}");
    let y = chi2(&second, &probs(&rows[1], &p));
    assert!(y < CHI2_DF4_P001, "second token after draft 1: chi-square {y:.2} over {second:?}");
}
