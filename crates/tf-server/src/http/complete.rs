//! `/v1/completions`, and what both generation endpoints share: choices on blocking threads, plain JSON or SSE.

use super::api::{Common, GenParams, warn_unknown};
use super::drive::{Delta, Summary, drive, usage};
use super::error::ApiError;
use super::{AppState, parse_body, submit_error, tokenize_prompt};
use crate::lanes::{Canceller, Events, TokenEvent};
use crate::tokenizer::Tokenizer;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as Sse, Sse as SseBody};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The SSE side of a response, shared by a request's choices.
pub type Tx = mpsc::Sender<Result<Sse, Infallible>>;

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

#[derive(Deserialize)]
struct CompletionBody {
    #[serde(flatten)]
    common: Common,
    prompt: Prompt,
    logprobs: Option<i64>,
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A fresh id: `prefix` then a mix of the time and a process-wide counter, so no two responses or tool calls share one.
pub(crate) fn unique_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let mix = tf_core::rng::SplitMix64::new(N.fetch_add(1, Ordering::Relaxed) ^ now().rotate_left(20)).next_u64();
    format!("{prefix}{mix:016x}")
}

pub(crate) fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// Sends one SSE data line from a blocking thread; false once the client is gone.
pub(crate) fn send(tx: &Tx, v: &Value) -> bool {
    tx.blocking_send(Ok(Sse::default().data(v.to_string()))).is_ok()
}

/// Submits one lane request per choice before any runs, so a full queue refuses the request as a whole.
fn submit_all(s: &AppState, prompt: &[u32], p: &GenParams) -> Result<Vec<Events>, ApiError> {
    let host = &s.engine()?.host;
    (0..p.n).map(|i| host.submit(p.request(prompt.to_vec(), i)).map_err(submit_error)).collect()
}

/// What one choice runs on its blocking thread: its index, the tokenizer, the prompt and its lane events.
pub(crate) type Work<T> = dyn Fn(usize, &Tokenizer, &[u32], Events) -> T + Send + Sync;

/// Cancels a plain request's lanes when its handler is dropped (the client hung up); harmless once they have ended.
struct CancelOnDrop(Vec<Canceller>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(Canceller::cancel);
    }
}

/// Runs every choice to the end on blocking threads and returns their results in choice order.
pub(crate) async fn collect_choices<T: Send + 'static>(
    s: &Arc<AppState>,
    prompt: Vec<u32>,
    p: &GenParams,
    work: Arc<Work<T>>,
) -> Result<Vec<T>, ApiError> {
    let lanes = submit_all(s, &prompt, p)?;
    let _hang_up = CancelOnDrop(lanes.iter().map(Events::canceller).collect());
    let tok = s.engine()?.tok.clone();
    let prompt = Arc::new(prompt);
    let mut handles = Vec::new();
    for (i, lane) in lanes.into_iter().enumerate() {
        let (tok, prompt, work) = (tok.clone(), prompt.clone(), work.clone());
        handles.push(tokio::task::spawn_blocking(move || work(i, &tok, &prompt, lane)));
    }
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.map_err(internal)?);
    }
    Ok(out)
}

/// Streams every choice as server-sent events; after all end, the usage chunk (if asked) and `[DONE]`.
pub(crate) async fn stream_choices(
    s: &Arc<AppState>,
    prompt: Vec<u32>,
    p: &GenParams,
    work: impl Fn(usize, &Tokenizer, &[u32], Events, &Tx) -> Result<Summary, String> + Send + Sync + 'static,
    usage_chunk: impl FnOnce(Value) -> Value + Send + 'static,
) -> Result<Response, ApiError> {
    let (tx, rx) = mpsc::channel(64);
    let sink = tx.clone();
    let work: Arc<Work<Result<Summary, String>>> =
        Arc::new(move |i, tok, prompt, lane| work(i, tok, prompt, lane, &sink));
    let lanes = submit_all(s, &prompt, p)?;
    let tok = s.engine()?.tok.clone();
    let prompt = Arc::new(prompt);
    let handles: Vec<_> = lanes
        .into_iter()
        .enumerate()
        .map(|(i, lane)| {
            let (tok, prompt, work) = (tok.clone(), prompt.clone(), work.clone());
            tokio::task::spawn_blocking(move || work(i, &tok, &prompt, lane))
        })
        .collect();
    let include_usage = p.include_usage;
    tokio::spawn(async move {
        let (mut done, mut failed) = (Vec::new(), None);
        for h in handles {
            match h.await {
                Ok(Ok(summary)) => done.push(summary),
                Ok(Err(e)) => failed = Some(e),
                Err(e) => failed = Some(e.to_string()),
            }
        }
        let last = match failed {
            Some(e) => Some(json!({"error": {"message": e, "type": "server_error", "param": null, "code": null}})),
            None => include_usage.then(|| usage_chunk(usage(&done))),
        };
        if let Some(v) = last {
            let _ = tx.send(Ok(Sse::default().data(v.to_string()))).await;
        }
        let _ = tx.send(Ok(Sse::default().data("[DONE]"))).await;
    });
    Ok(SseBody::new(ReceiverStream::new(rx)).into_response())
}

/// Completions-format logprobs of a choice: tokens, their logprobs, top alternatives by text and offsets.
fn completion_logprobs(tok: &Tokenizer, tokens: &[TokenEvent]) -> Value {
    let text = |id: u32| tok.decode(&[id], false).unwrap_or_default();
    let mut offset = 0;
    let mut offsets = Vec::new();
    for t in tokens {
        offsets.push(offset);
        offset += text(t.id).len();
    }
    let top: Vec<Value> = tokens
        .iter()
        .map(|t| t.top.iter().map(|&(id, lp)| (text(id), json!(lp))).collect::<serde_json::Map<_, _>>().into())
        .collect();
    json!({"tokens": tokens.iter().map(|t| text(t.id)).collect::<Vec<_>>(),
        "token_logprobs": tokens.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "token_ids": tokens.iter().map(|t| t.id).collect::<Vec<_>>(),
        "top_logprobs": top, "text_offset": offsets})
}

pub async fn completions(State(s): State<Arc<AppState>>, body: Bytes) -> Result<Response, ApiError> {
    let st = s.clone();
    let (p, prompt) = s
        .prepare(move || {
            let b: CompletionBody = parse_body(&body)?;
            warn_unknown(&body, "/v1/completions", &["prompt", "logprobs", "echo", "suffix", "best_of"]);
            let p = b.common.params(b.logprobs)?;
            let e = st.engine()?;
            let prompt = match b.prompt {
                Prompt::Ids(ids) => ids,
                Prompt::Text(t) => {
                    let mut ids = tokenize_prompt(e, &t, 1, "prompt")?;
                    if ids.first() != Some(&e.bos) {
                        ids.insert(0, e.bos);
                    }
                    ids
                }
            };
            let vocab = e.tok.vocab_size();
            if let Some(bad) = prompt.iter().find(|&&t| t as usize >= vocab) {
                return Err(ApiError::param("prompt", format!("token id {bad} is outside the vocabulary")));
            }
            p.check_vocab(vocab)?;
            Ok((p, prompt))
        })
        .await?;
    let (id, model, created) = (unique_id("cmpl-"), s.model_id.clone(), now());
    let chunk = move |i: usize, text: &str, lp: Value, finish: Option<&str>| json!({"id": id, "object": "text_completion", "created": created, "model": model, "choices": [{"index": i, "text": text, "logprobs": lp, "finish_reason": finish}]});
    let with_lp = p.logprobs.is_some();
    if p.stream {
        let (pp, c) = (p.clone(), chunk.clone());
        let work = move |i: usize, tok: &Tokenizer, prompt: &[u32], lane: Events, tx: &Tx| {
            let r = drive(tok, prompt, lane, &pp, true, |d: Delta<'_>| {
                let lp = d
                    .token
                    .filter(|_| with_lp)
                    .map_or(Value::Null, |t| completion_logprobs(tok, std::slice::from_ref(t)));
                (d.text.is_empty() && lp.is_null()) || send(tx, &c(i, &d.text, lp, None))
            });
            if let Ok(s) = &r {
                send(tx, &c(i, "", Value::Null, Some(s.finish)));
            }
            r
        };
        let usage_chunk = move |u: Value| {
            let mut v = chunk(0, "", Value::Null, None);
            v["choices"] = json!([]);
            v["usage"] = u;
            v
        };
        return stream_choices(&s, prompt, &p, work, usage_chunk).await;
    }
    let pp = p.clone();
    let work: Arc<Work<_>> = Arc::new(move |_, tok, prompt, lane| {
        let (mut text, mut tokens) = (String::new(), Vec::new());
        let r = drive(tok, prompt, lane, &pp, true, |d| {
            text.push_str(&d.text);
            tokens.extend(d.token.cloned());
            true
        });
        r.map(|s| (text, completion_logprobs(tok, &tokens), s))
    });
    let results = collect_choices(&s, prompt, &p, work).await?;
    let mut choices = Vec::new();
    let mut summaries = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        let (text, lp, summary) = r.map_err(internal)?;
        let lp = if with_lp { lp } else { Value::Null };
        choices.push(json!({"index": i, "text": text, "logprobs": lp, "finish_reason": summary.finish}));
        summaries.push(summary);
    }
    let mut v = chunk(0, "", Value::Null, None);
    v["choices"] = json!(choices);
    v["usage"] = usage(&summaries);
    Ok(axum::Json(v).into_response())
}
