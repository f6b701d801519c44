//! Speculative verification (issue 26): which drafted tokens a verify window keeps, losslessly, greedy or sampled.

use super::sample::{Rng, SamplingParams, argmax, distribution, draw};

/// The draft model's distribution at one draft position: ids and weights, or `None` for a greedy drafter (all mass on its token).
pub type DraftDist = Option<Vec<(u32, f64)>>;

/// The tokens a verify window over `[t, d1 .. dk]` emits: greedy, the agreed prefix then the target's token; sampled, the lossless rule.
pub fn accept(rows: &[Vec<f32>], drafts: &[u32], q: &[DraftDist], p: &SamplingParams, rng: &mut Rng) -> Vec<u32> {
    assert_eq!(rows.len(), drafts.len() + 1, "a verify window scores t and every draft");
    let mut out = Vec::with_capacity(rows.len());
    for (i, &d) in drafts.iter().enumerate() {
        if p.temperature <= 0.0 {
            let a = argmax(&rows[i]);
            out.push(a);
            if a != d {
                return out;
            }
            continue;
        }
        let target = distribution(&rows[i], p);
        let (pd, qd) = (prob(&target, d), q.get(i).and_then(|x| x.as_ref()).map_or(1.0, |x| prob(x, d)));
        // Keep with probability min(1, p/q), else draw from max(0, p - q): the emitted tokens follow p exactly (Leviathan et al. 2023).
        if qd > 0.0 && rng.uniform() < (pd / qd).min(1.0) {
            out.push(d);
            continue;
        }
        out.push(draw(&residual(&target, q.get(i).and_then(|x| x.as_deref()), d), rng));
        return out;
    }
    let last = &rows[drafts.len()];
    out.push(if p.temperature <= 0.0 { argmax(last) } else { draw(&distribution(last, p), rng) });
    out
}

/// `id`'s probability under weights that need not sum to 1.
fn prob(dist: &[(u32, f64)], id: u32) -> f64 {
    let total: f64 = dist.iter().map(|d| d.1).sum();
    dist.iter().find(|d| d.0 == id).map_or(0.0, |d| d.1 / total.max(f64::MIN_POSITIVE))
}

/// `max(0, p - q)` over the target's ids; a greedy drafter's `q` is all on `drafted`.
fn residual(target: &[(u32, f64)], q: Option<&[(u32, f64)]>, drafted: u32) -> Vec<(u32, f64)> {
    let p_total: f64 = target.iter().map(|d| d.1).sum();
    let r: Vec<(u32, f64)> = target
        .iter()
        .map(|&(id, w)| {
            let qi = q.map_or(f64::from(u8::from(id == drafted)), |q| prob(q, id));
            (id, (w / p_total - qi).max(0.0))
        })
        .filter(|d| d.1 > 0.0)
        .collect();
    // p <= q everywhere only when p == q, where a rejection is rounding: draw from p itself.
    if r.is_empty() { target.to_vec() } else { r }
}
