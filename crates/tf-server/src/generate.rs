//! `tf generate`: greedy decoding of one prompt through the model family (CPU or one GPU), streamed as text.

use crate::tokenizer::{IncrementalDecoder, Tokenizer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tf_core::{Error, Result};
use tf_family::Family;

pub use tf_core::ops::argmax;

/// Counts and times of one generation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub prompt_tokens: usize,
    pub prompt_secs: f64,
    /// Sampled ids, the first from the prefill's logits and an ending EOS included.
    pub generated: usize,
    /// Decode forwards: one fewer than `generated`, since the prefill yields the first id.
    pub decode_steps: usize,
    pub decode_secs: f64,
}

fn rate(n: usize, secs: f64) -> String {
    if n == 0 || secs <= 0.0 { "-".into() } else { format!("{:.0}", n as f64 / secs) }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "prompt {} tokens in {:.2} s ({} tok/s), generated {} tokens in {:.2} s ({} tok/s)",
            self.prompt_tokens,
            self.prompt_secs,
            rate(self.prompt_tokens, self.prompt_secs),
            self.generated,
            self.decode_secs,
            rate(self.decode_steps, self.decode_secs)
        )
    }
}

/// Prefills `prompt` on `lane` in chunks of `chunk` ids, then decodes greedily until `eos` or `max_tokens` ids.
pub fn greedy<F: Family>(
    m: &F,
    lane: &mut F::Lane,
    prompt: &[u32],
    chunk: usize,
    max_tokens: usize,
    eos: u32,
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<Stats> {
    if prompt.is_empty() || chunk == 0 {
        return Err(Error::Invalid("greedy needs a prompt and a chunk of at least one id".into()));
    }
    let mut stats = Stats { prompt_tokens: prompt.len(), ..Stats::default() };
    let start = Instant::now();
    let mut logits = None;
    let n_chunks = prompt.len().div_ceil(chunk);
    for (i, c) in prompt.chunks(chunk).enumerate() {
        logits = m.prefill(lane, c, i + 1 == n_chunks).map_err(step_err)?;
    }
    let mut logits = logits.ok_or_else(|| Error::Invalid("prefill returned no logits".into()))?;
    stats.prompt_secs = start.elapsed().as_secs_f64();
    let start = Instant::now();
    while stats.generated < max_tokens {
        let id = argmax(&logits);
        stats.generated += 1;
        if id == eos {
            break;
        }
        on_token(id)?;
        if stats.generated == max_tokens {
            break;
        }
        logits = m
            .decode(lane, &[id])
            .map_err(step_err)?
            .pop()
            .ok_or_else(|| Error::Invalid("decode returned no logits".into()))?;
        stats.decode_steps += 1;
    }
    stats.decode_secs = start.elapsed().as_secs_f64();
    Ok(stats)
}

fn step_err(e: impl std::error::Error) -> Error {
    Error::Invalid(e.to_string())
}

/// The command line of `tf generate`.
#[derive(Clone, Debug, PartialEq)]
pub struct Args {
    /// `None`: the default model (the shipped gate model).
    pub model: Option<PathBuf>,
    pub prompt: String,
    pub max_tokens: usize,
    /// Prompt ids per prefill call; `None` feeds the whole prompt at once.
    pub chunk: Option<usize>,
    pub replay: bool,
    /// DeepSeek's original checkpoint, for the Engram tables an EXL3 checkpoint lacks.
    pub engram_from: Option<PathBuf>,
    /// `None`: the CPU reference; `Some(n)`: GPU `n`.
    pub gpu: Option<usize>,
}

/// The prompt's ids with BOS first: DeepSeek's template adds none, so it is prepended unless already there.
pub fn prompt_ids(tok: &Tokenizer, text: &str, bos: u32) -> Result<Vec<u32>> {
    let mut ids = tok.encode(text, true)?;
    if ids.first() != Some(&bos) {
        ids.insert(0, bos);
    }
    Ok(ids)
}

/// Runs `tf generate`, writing text to `out` as it is decoded.
pub fn run(args: &Args, out: &mut impl std::io::Write) -> Result<Stats, crate::Error> {
    let dir = crate::http::serve::model_dir(args.model.as_deref())?;
    if !dir.is_dir() {
        return Err(Error::Invalid(format!("{}: not a model directory (no such directory)", dir.display())).into());
    }
    let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))?;
    let opts = tf_dsv41::Options { replay: args.replay, ..tf_dsv41::Options::default() }
        .with_engram_from(args.engram_from.as_deref());
    let model = tf_dsv41::family::Loaded::load(&dir, opts, args.gpu, false)?;
    let bos = model.bos();
    match model {
        tf_dsv41::family::Loaded::Cpu(m) => Ok(go(&*m, &dir, &tokenizer, bos, args, out)?),
        tf_dsv41::family::Loaded::Cuda(m) => Ok(go(&*m, &dir, &tokenizer, bos, args, out)?),
    }
}

/// The greedy loop on a loaded family, with the tokenizer checked against its vocabulary.
fn go<F: Family>(
    m: &F,
    dir: &Path,
    tokenizer: &Tokenizer,
    bos: u32,
    args: &Args,
    out: &mut impl std::io::Write,
) -> Result<Stats> {
    if tokenizer.vocab_size() > m.vocab_size() {
        let (t, v) = (tokenizer.vocab_size(), m.vocab_size());
        return Err(Error::Invalid(format!("{}: tokenizer has {t} ids but the model only {v}", dir.display())));
    }
    let prompt = prompt_ids(tokenizer, &args.prompt, bos)?;
    let chunk = args.chunk.unwrap_or(prompt.len());
    let mut detok = IncrementalDecoder::new(tokenizer, &prompt, true);
    let mut lane = m.new_lane().map_err(step_err)?;
    let stdout_err = |e: std::io::Error| Error::Invalid(format!("writing output: {e}"));
    let stats = greedy(m, &mut lane, &prompt, chunk, args.max_tokens, m.eos_token(), |id| {
        let text = detok.push(id)?;
        out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(stdout_err)
    })?;
    let tail = detok.finish()?;
    writeln!(out, "{tail}").and_then(|()| out.flush()).map_err(stdout_err)?;
    Ok(stats)
}
