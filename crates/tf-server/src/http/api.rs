//! Request fields shared by `/v1/completions` and `/v1/chat/completions`, validated into a generation request.

use super::error::ApiError;
use crate::lanes::{GenRequest, SamplingParams};
use serde::Deserialize;
use serde_json::Value;

/// `stop`: one string or a list.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// Sampling and output fields common to both endpoints; unknown fields are accepted and logged (see `warn_unknown`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Common {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub seed: Option<u64>,
    pub stop: Option<Stop>,
    pub n: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<Value>,
    /// Teacher forcing: the completion is exactly these token ids, returned with their logprobs.
    pub forced_tokens: Option<Vec<u32>>,
    /// vLLM's `ignore_eos`: generate past EOS up to `max_tokens` (benchmarks); stop strings and tokens still apply.
    #[serde(default)]
    pub ignore_eos: bool,
    /// `false`: no DSpark drafting for this request (default: draft where the host does; the reply's bits are the same).
    pub draft: Option<bool>,
    /// OpenAI `logit_bias`: token id (as a string key) to a bias in [-100, 100].
    pub logit_bias: Option<Value>,
}

/// Field names `Common` reads, for the unknown-field warning.
pub const COMMON_FIELDS: [&str; 17] = [
    "model",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "n",
    "stream",
    "stream_options",
    "forced_tokens",
    "draft",
    "ignore_eos",
    "logit_bias",
    "user",
    "presence_penalty",
];

/// Logs the body's top-level fields that neither `Common` nor the endpoint reads, so a silently ignored option is visible.
pub fn warn_unknown(body: &[u8], endpoint: &str, own: &[&str]) {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else { return };
    let unknown: Vec<&str> =
        map.keys().map(String::as_str).filter(|k| !COMMON_FIELDS.contains(k) && !own.contains(k)).collect();
    if !unknown.is_empty() {
        tracing::warn!(endpoint, "ignoring unknown request fields: {}", unknown.join(", "));
    }
}

/// Everything the generation loop needs besides the prompt ids.
#[derive(Clone, Debug)]
pub struct GenParams {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub logprobs: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
    pub n: usize,
    pub forced: Vec<u32>,
    pub draft: bool,
    pub ignore_eos: bool,
    pub logit_bias: Vec<(u32, f32)>,
}

/// Default completion length when the request names none.
pub const DEFAULT_MAX_TOKENS: usize = 256;
/// Most alternatives per token a request may ask for, as OpenAI allows.
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Most choices per request.
pub const MAX_N: usize = 16;

impl Common {
    /// Checks ranges and builds the generation parameters; `logprobs` is the number of alternatives, if any.
    pub fn params(&self, logprobs: Option<i64>) -> Result<GenParams, ApiError> {
        let max = self.max_completion_tokens.or(self.max_tokens);
        let max_tokens = match max {
            None => DEFAULT_MAX_TOKENS,
            Some(m) if m >= 1 => m as usize,
            Some(m) => return Err(ApiError::param("max_tokens", format!("max_tokens must be at least 1, got {m}"))),
        };
        let temperature = self.temperature.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ApiError::param("temperature", format!("temperature must be in [0, 2], got {temperature}")));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::param("top_p", format!("top_p must be in (0, 1], got {top_p}")));
        }
        let top_k = match self.top_k.unwrap_or(-1) {
            -1 | 0 => 0,
            k if k > 0 => k as usize,
            k => return Err(ApiError::param("top_k", format!("top_k must be -1, 0 or positive, got {k}"))),
        };
        let n = match self.n.unwrap_or(1) {
            n if (1..=MAX_N as i64).contains(&n) => n as usize,
            n => return Err(ApiError::param("n", format!("n must be in [1, {MAX_N}], got {n}"))),
        };
        let forced = self.forced_tokens.clone().unwrap_or_default();
        if self.forced_tokens.is_some() && (forced.is_empty() || n != 1) {
            return Err(ApiError::param("forced_tokens", "forced_tokens must be a non-empty list, with n = 1"));
        }
        let logprobs = match logprobs {
            None => None,
            Some(k) if (0..=MAX_TOP_LOGPROBS as i64).contains(&k) => Some(k as usize),
            Some(k) => {
                return Err(ApiError::param("top_logprobs", format!("top_logprobs must be in [0, 20], got {k}")));
            }
        };
        let logprobs = if forced.is_empty() { logprobs } else { Some(logprobs.unwrap_or(0)) };
        let stop = match &self.stop {
            _ if !forced.is_empty() => Vec::new(),
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) if v.len() <= 4 => v.clone(),
            Some(Stop::Many(_)) => return Err(ApiError::param("stop", "at most 4 stop sequences")),
        };
        let seed = self.seed.unwrap_or_else(fresh_seed);
        if self.stream_options.as_ref().is_some_and(|o| !o.is_null()) && !self.stream {
            return Err(ApiError::param("stream_options", "stream_options is only allowed when stream is true"));
        }
        let include_usage =
            self.stream_options.as_ref().and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
        Ok(GenParams {
            sampling: SamplingParams { temperature, top_k, top_p, seed },
            stop,
            logprobs,
            stream: self.stream,
            include_usage,
            n,
            max_tokens: if forced.is_empty() { max_tokens } else { forced.len() },
            forced,
            draft: self.draft.unwrap_or(true),
            ignore_eos: self.ignore_eos,
            logit_bias: logit_bias(self.logit_bias.as_ref())?,
        })
    }
}

impl GenParams {
    /// Refuses forced tokens and biased ids outside a vocabulary of `vocab` ids.
    pub fn check_vocab(&self, vocab: usize) -> Result<(), ApiError> {
        let outside = |t: &u32| *t as usize >= vocab;
        if let Some(bad) = self.forced.iter().find(|t| outside(t)) {
            return Err(ApiError::param(
                "forced_tokens",
                format!("token id {bad} is outside the vocabulary of {vocab}"),
            ));
        }
        if let Some((bad, _)) = self.logit_bias.iter().find(|(t, _)| outside(t)) {
            return Err(ApiError::param("logit_bias", format!("token id {bad} is outside the vocabulary of {vocab}")));
        }
        Ok(())
    }

    /// The lane request of choice `index`: choice 0 keeps the request's seed, the others get seeds derived from it.
    pub fn request(&self, prompt: Vec<u32>, index: usize) -> GenRequest {
        let mut sampling = self.sampling.clone();
        if index > 0 {
            sampling.seed = tf_core::rng::SplitMix64::new(sampling.seed ^ (index as u64).rotate_left(32)).next_u64();
        }
        GenRequest {
            prompt,
            max_tokens: self.max_tokens,
            sampling,
            stop_tokens: Vec::new(),
            logprobs: self.logprobs,
            forced: self.forced.clone(),
            logit_bias: self.logit_bias.clone(),
            no_draft: !self.draft,
            ignore_eos: self.ignore_eos,
        }
    }
}

/// Most entries a `logit_bias` may hold, as OpenAI allows.
pub const MAX_LOGIT_BIAS: usize = 300;

/// Parses `logit_bias` as OpenAI does: an object of token-id keys to numbers in [-100, 100]; sorted by id.
fn logit_bias(v: Option<&Value>) -> Result<Vec<(u32, f32)>, ApiError> {
    let bad = |m: String| ApiError::param("logit_bias", m);
    let map = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(other) => return Err(bad(format!("logit_bias must be an object of token ids to numbers, got {other}"))),
    };
    if map.len() > MAX_LOGIT_BIAS {
        return Err(bad(format!("logit_bias holds at most {MAX_LOGIT_BIAS} entries, got {}", map.len())));
    }
    let mut out = Vec::with_capacity(map.len());
    for (k, v) in map {
        let id = k.parse::<u32>().map_err(|_| bad(format!("logit_bias keys must be token ids, got {k:?}")))?;
        let b = v.as_f64().ok_or_else(|| bad(format!("logit_bias[{k:?}] must be a number, got {v}")))?;
        if !(-100.0..=100.0).contains(&b) {
            return Err(bad(format!("logit_bias[{k:?}] must be in [-100, 100], got {b}")));
        }
        out.push((id, b as f32));
    }
    out.sort_by_key(|&(id, _)| id);
    if let Some(w) = out.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(bad(format!("logit_bias names token {} twice", w[0].0)));
    }
    Ok(out)
}

/// A seed for requests that name none: distinct per request, so sampling is not repeated by accident.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
}
