//! Token choice from logits: greedy, or seeded temperature / top-k / top-p sampling; and logprobs.

pub use tf_core::ops::argmax;
use tf_core::rng::SplitMix64;

/// How one request picks its tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 }
    }
}

/// A request's generator: SplitMix64 seeded per request, so a seed reproduces its tokens alone or batched.
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed))
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Log-softmax of the raw logits in f64, rounded to f32.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln() + m;
    logits.iter().map(|&x| (x as f64 - lse) as f32).collect()
}

/// The `n` most likely ids with their logprobs, best first, ties to the lower id.
pub fn top_logprobs(logprobs: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..logprobs.len() as u32).collect();
    idx.sort_by(|&a, &b| logprobs[b as usize].total_cmp(&logprobs[a as usize]).then(a.cmp(&b)));
    idx.into_iter().take(n).map(|i| (i, logprobs[i as usize])).collect()
}

/// The logits with a request's `logit_bias` added (OpenAI and vLLM add it before temperature and filtering).
pub fn biased(logits: &[f32], bias: &[(u32, f32)]) -> Vec<f32> {
    let mut out = logits.to_vec();
    for &(id, b) in bias {
        if let Some(x) = out.get_mut(id as usize) {
            *x += b;
        }
    }
    out
}

/// Log-probabilities of `softmax(logits / t)`, from `(x - max) / t` in f64 so no temperature overflows to inf − inf.
fn tempered_log_softmax(logits: &[f32], t: f64) -> Vec<f32> {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z: Vec<f64> = logits.iter().map(|&x| (x as f64 - m) / t).collect();
    let lse = z.iter().map(|&v| v.exp()).sum::<f64>().ln();
    z.iter().map(|&v| (v - lse) as f32).collect()
}

/// What a request samples from at temperature > 0: the tempered, top-k/top-p filtered ids and their weights (sum near 1).
pub fn distribution(logits: &[f32], p: &SamplingParams) -> Vec<(u32, f64)> {
    let lp = tempered_log_softmax(logits, p.temperature as f64);
    let mut cand = top_logprobs(&lp, if p.top_k == 0 { lp.len() } else { p.top_k.min(lp.len()) });
    let mut mass = 0.0f64;
    let mut keep = 0;
    for (_, l) in &cand {
        mass += (*l as f64).exp();
        keep += 1;
        if mass >= p.top_p as f64 {
            break;
        }
    }
    cand.truncate(keep.max(1));
    // Unnormalized, as the sampler has always drawn: `draw` scales its uniform by the total, so seeded replies keep their bits.
    cand.into_iter().map(|(id, l)| (id, (l as f64).exp())).collect()
}

/// One id drawn from weights with one uniform scaled by their total, walking them in order (the last takes any rounding).
pub fn draw(dist: &[(u32, f64)], rng: &mut Rng) -> u32 {
    let mut u = rng.uniform() * dist.iter().map(|d| d.1).sum::<f64>();
    for &(id, q) in dist {
        u -= q;
        if u < 0.0 {
            return id;
        }
    }
    dist[dist.len() - 1].0
}

/// Picks the next token: greedy at temperature 0, else sampling from the tempered, top-k/top-p filtered distribution.
pub fn sample(logits: &[f32], p: &SamplingParams, rng: &mut Rng) -> u32 {
    if p.temperature <= 0.0 {
        return argmax(logits);
    }
    draw(&distribution(logits, p), rng)
}
