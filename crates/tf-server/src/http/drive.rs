//! Runs one generation on a blocking thread: lane events → detokenized text with stop strings → a caller's sink.

use super::api::GenParams;
use super::text::StopScan;
use crate::lanes::{Event, Events, Finish, TokenEvent};
use crate::tokenizer::{IncrementalDecoder, Tokenizer};
use serde_json::{Value, json};

/// How a generation ended, with its usage.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub finish: &'static str,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens served from the prompt cache.
    pub cached_tokens: usize,
    /// Draft tokens verified and accepted (DSpark).
    pub drafts: (usize, usize),
}

/// Why a choice ended without finishing; its message is the 500's or the stream's error chunk.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// The incremental detokenizer (tf-core's error).
    #[error(transparent)]
    Detokenize(#[from] tf_core::Error),
    /// The lane host's message for a failed step, passed on as it is.
    #[error("{0}")]
    Model(String),
    #[error("client went away")]
    ClientGone,
    #[error("the model stopped before finishing")]
    Ended,
}

/// Text released by one token (possibly empty while a stop string or a character is still undecided).
pub struct Delta<'a> {
    pub text: String,
    pub token: Option<&'a TokenEvent>,
}

/// Feeds events to `sink` until done; `sink` returning false (client gone) drops the lane's receiver, which cancels it.
pub fn drive(
    tok: &Tokenizer,
    prompt: &[u32],
    rx: Events,
    p: &GenParams,
    skip_special: bool,
    mut sink: impl FnMut(Delta<'_>) -> bool,
) -> Result<Summary, DriveError> {
    let mut dec = IncrementalDecoder::new(tok, prompt, skip_special);
    let mut stop = StopScan::new(p.stop.clone());
    let mut completion = 0;
    while let Ok(ev) = rx.recv() {
        match ev {
            Event::Token(t) => {
                completion += 1;
                let text = stop.push(&dec.push(t.id)?);
                if !sink(Delta { text, token: Some(&t) }) {
                    return Err(DriveError::ClientGone);
                }
                if stop.hit() {
                    let (cached_tokens, drafts) = (rx.cached_tokens(), rx.draft_counts());
                    rx.stop_here();
                    return Ok(Summary {
                        finish: "stop",
                        prompt_tokens: prompt.len(),
                        completion_tokens: completion,
                        cached_tokens,
                        drafts,
                    });
                }
            }
            Event::Done { finish, prompt_tokens, completion_tokens, cached_tokens } => {
                let tail = dec.finish()?;
                let mut text = stop.push(&tail);
                text.push_str(&stop.finish());
                if !text.is_empty() {
                    sink(Delta { text, token: None });
                }
                let finish = if stop.hit() || finish == Finish::Stop { "stop" } else { "length" };
                let drafts = rx.draft_counts();
                return Ok(Summary { finish, prompt_tokens, completion_tokens, cached_tokens, drafts });
            }
            Event::Error(e) => return Err(DriveError::Model(e)),
        }
    }
    Err(DriveError::Ended)
}

/// One token's logprob entry in the chat format (with `token_id`, as vLLM and SGLang add).
pub fn chat_logprob(tok: &Tokenizer, t: &TokenEvent) -> Value {
    let entry = |id: u32, lp: f32| {
        let text = tok.decode(&[id], false).unwrap_or_default();
        json!({"token": text, "logprob": lp, "bytes": text.as_bytes(), "token_id": id})
    };
    let mut v = entry(t.id, t.logprob.unwrap_or(0.0));
    v["top_logprobs"] = t.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
    v
}

/// Usage over a request's choices: the prompt counts once, completions add up.
pub fn usage(choices: &[Summary]) -> Value {
    let prompt = choices.first().map_or(0, |s| s.prompt_tokens);
    let cached = choices.iter().map(|s| s.cached_tokens).max().unwrap_or(0);
    let completion: usize = choices.iter().map(|s| s.completion_tokens).sum();
    let mut u = json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached}});
    let (drafted, accepted) = choices.iter().fold((0, 0), |t, s| (t.0 + s.drafts.0, t.1 + s.drafts.1));
    // OpenAI's names for predicted-output tokens, which is what verified drafts are.
    if drafted > 0 {
        u["completion_tokens_details"] =
            json!({"accepted_prediction_tokens": accepted, "rejected_prediction_tokens": drafted - accepted});
    }
    u
}
