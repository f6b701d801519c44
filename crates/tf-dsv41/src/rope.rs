//! RoPE tables (dsv41 §5): interleaved pairs on the last `rope_head_dim` channels, one table per layer kind.

use crate::config::{Config, RopeKind};

/// Inverse frequencies of one table, in f32 as the reference computes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    pub inv_freq: Vec<f32>,
}

impl Rope {
    /// The table for a layer kind: θ = rope_theta plain, or θ = compress_rope_theta with YaRN.
    pub fn new(cfg: &Config, kind: RopeKind) -> Rope {
        let dim = cfg.rope_head_dim;
        let (base, yarn) = match kind {
            RopeKind::Plain => (cfg.rope_theta, false),
            RopeKind::Yarn => (cfg.compress_rope_theta, cfg.original_seq_len > 0),
        };
        let mut inv_freq: Vec<f32> = (0..dim / 2).map(|i| 1.0 / base.powf((2 * i) as f32 / dim as f32)).collect();
        if yarn {
            let orig = cfg.original_seq_len as f64;
            let corr =
                |rot: f64| dim as f64 * (orig / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * (base as f64).ln());
            let low = corr(cfg.beta_fast as f64).floor().max(0.0);
            let high = corr(cfg.beta_slow as f64).ceil().min(dim as f64 - 1.0);
            let span = (high - low).max(1e-3) as f32;
            for (i, f) in inv_freq.iter_mut().enumerate() {
                let ramp = ((i as f32 - low as f32) / span).clamp(0.0, 1.0);
                let smooth = 1.0 - ramp;
                *f = *f / cfg.rope_factor * (1.0 - smooth) + *f * smooth;
            }
        }
        Rope { inv_freq }
    }

    /// (cos, sin) of every pair at position `pos`, as f32 like `torch.polar` of `pos · f`.
    pub fn angles(&self, pos: usize) -> impl Iterator<Item = (f32, f32)> + '_ {
        self.inv_freq.iter().map(move |&f| {
            let a = pos as f32 * f;
            (a.cos(), a.sin())
        })
    }

    /// Rotates the last `2·len(inv_freq)` values of `x` (pairs (2i, 2i+1)) by position `pos`; `inverse` conjugates.
    pub fn apply(&self, x: &mut [f32], pos: usize, inverse: bool) {
        let start = x.len() - 2 * self.inv_freq.len();
        for (pair, (c, s)) in x[start..].chunks_exact_mut(2).zip(self.angles(pos)) {
            let s = if inverse { -s } else { s };
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * c - b * s;
            pair[1] = a * s + b * c;
        }
    }
}
