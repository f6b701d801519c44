//! `/v1/completions` and `/v1/chat/completions`, plain JSON or server-sent events.

use super::api::{Common, GenParams};
use super::drive::{Delta, Summary, chat_logprob, drive, usage};
use super::error::ApiError;
use super::{AppState, parse_body, submit_error};
use crate::chat::{ChatMessage, ChatOptions, CompletionStream, StreamEvent, Tool, encode_messages, parse_completion};
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

#[derive(Deserialize)]
struct ChatBody {
    #[serde(flatten)]
    common: Common,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    tools: Vec<Tool>,
    #[serde(default)]
    logprobs: bool,
    top_logprobs: Option<i64>,
    chat_template_kwargs: Option<Value>,
    reasoning_effort: Option<Value>,
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn request_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{:x}{:06x}", now(), N.fetch_add(1, Ordering::Relaxed))
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// Sends one SSE data line; false once the client is gone.
fn send(tx: &mpsc::Sender<Result<Sse, Infallible>>, v: &Value) -> bool {
    tx.blocking_send(Ok(Sse::default().data(v.to_string()))).is_ok()
}

/// Submits the prompt, then runs `work` on a blocking thread with the event receiver.
async fn run<T: Send + 'static>(
    s: &Arc<AppState>,
    prompt: Vec<u32>,
    p: &GenParams,
    work: impl FnOnce(Arc<AppState>, Vec<u32>, std::sync::mpsc::Receiver<crate::lanes::Event>) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let rx = s.engine()?.host.submit(p.request(prompt.clone())).map_err(submit_error)?;
    let state = s.clone();
    tokio::task::spawn_blocking(move || work(state, prompt, rx)).await.map_err(internal)
}

pub async fn completions(State(s): State<Arc<AppState>>, body: Bytes) -> Result<Response, ApiError> {
    let b: CompletionBody = parse_body(&body)?;
    let p = b.common.params(b.logprobs)?;
    let e = s.engine()?;
    let prompt = match b.prompt {
        Prompt::Ids(ids) => ids,
        Prompt::Text(t) => {
            let mut ids = e.tok.encode(&t, false).map_err(|err| ApiError::param("prompt", err.to_string()))?;
            if ids.first() != Some(&e.bos) {
                ids.insert(0, e.bos);
            }
            ids
        }
    };
    if let Some(bad) = prompt.iter().find(|&&t| t as usize >= e.tok.vocab_size()) {
        return Err(ApiError::param("prompt", format!("token id {bad} is outside the vocabulary")));
    }
    let (id, model, created) = (request_id("cmpl"), s.model_id.clone(), now());
    let chunk = move |text: &str, finish: Option<&str>| json!({"id": id, "object": "text_completion", "created": created, "model": model, "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}]});
    if p.stream {
        let (tx, rx) = mpsc::channel(64);
        let pp = p.clone();
        run(&s, prompt, &p, move |st, prompt, lane| {
            let tok = st.engine.get().expect("engine is loaded").tok.clone();
            let r = drive(&tok, &prompt, lane, &pp, true, |d: Delta<'_>| {
                d.text.is_empty() || send(&tx, &chunk(&d.text, None))
            });
            finish_stream(&tx, r, |s| chunk("", Some(s.finish)), pp.include_usage);
        })
        .await?;
        return Ok(SseBody::new(ReceiverStream::new(rx)).into_response());
    }
    let pp = p.clone();
    let (text, summary) = run(&s, prompt, &p, move |st, prompt, lane| {
        let tok = st.engine.get().expect("engine is loaded").tok.clone();
        let mut text = String::new();
        let r = drive(&tok, &prompt, lane, &pp, true, |d| {
            text.push_str(&d.text);
            true
        });
        r.map(|s| (text, s))
    })
    .await?
    .map_err(internal)?;
    let mut v = chunk(&text, Some(summary.finish));
    v["usage"] = usage(&summary);
    Ok(axum::Json(v).into_response())
}

/// Final chunk, optional usage chunk and `[DONE]`; an error mid-stream becomes an error event.
fn finish_stream(
    tx: &mpsc::Sender<Result<Sse, Infallible>>,
    r: Result<Summary, String>,
    last: impl Fn(&Summary) -> Value,
    include_usage: bool,
) {
    match r {
        Ok(s) => {
            let _ = send(tx, &last(&s));
            if include_usage {
                let mut u = last(&s);
                u["choices"] = json!([]);
                u["usage"] = usage(&s);
                let _ = send(tx, &u);
            }
        }
        Err(e) => {
            let _ = send(tx, &json!({"error": {"message": e, "type": "server_error", "param": null, "code": null}}));
        }
    }
    let _ = tx.blocking_send(Ok(Sse::default().data("[DONE]")));
}

fn chat_options(b: &ChatBody) -> Result<ChatOptions, ApiError> {
    let mut o = ChatOptions::default();
    if let Some(k) = &b.chat_template_kwargs {
        for key in ["thinking", "enable_thinking"] {
            if let Some(v) = k.get(key).and_then(Value::as_bool) {
                o.thinking = v;
            }
        }
    }
    if let Some(e) = &b.reasoning_effort {
        o.set_reasoning_effort(e).map_err(|err| ApiError::param("reasoning_effort", err.to_string()))?;
    }
    Ok(o)
}

pub async fn chat(State(s): State<Arc<AppState>>, body: Bytes) -> Result<Response, ApiError> {
    let b: ChatBody = parse_body(&body)?;
    let p = b.common.params(if b.logprobs { Some(b.top_logprobs.unwrap_or(0)) } else { None })?;
    let opts = chat_options(&b)?;
    let e = s.engine()?;
    let text =
        encode_messages(&b.messages, &b.tools, &opts).map_err(|err| ApiError::param("messages", err.to_string()))?;
    let prompt = e.tok.encode(&text, false).map_err(|err| ApiError::param("messages", err.to_string()))?;
    let (id, model, thinking, created) = (request_id("chatcmpl"), s.model_id.clone(), opts.thinking, now());
    if p.stream {
        let (tx, rx) = mpsc::channel(64);
        let pp = p.clone();
        run(&s, prompt, &p, move |st, prompt, lane| {
            let tok = st.engine.get().expect("engine is loaded").tok.clone();
            let chunk = |delta: Value, logprobs: Value, finish: Option<&str>| json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]});
            let mut parser = CompletionStream::new(thinking);
            let calls = std::cell::Cell::new(0usize);
            let mut ok = send(&tx, &chunk(json!({"role": "assistant", "content": ""}), Value::Null, None));
            let deltas = |events: Vec<StreamEvent>, lp: Value| -> bool {
                let mut sent_lp = lp.is_null();
                for ev in events {
                    let d = stream_delta(ev, &calls);
                    let l = if sent_lp { Value::Null } else { lp.clone() };
                    sent_lp = true;
                    if !send(&tx, &chunk(d, l, None)) {
                        return false;
                    }
                }
                sent_lp || send(&tx, &chunk(json!({"content": ""}), lp, None))
            };
            let r = drive(&tok, &prompt, lane, &pp, false, |d| {
                let lp = d.token.filter(|_| pp.logprobs.is_some()).map_or(Value::Null, |t| json!({"content": [chat_logprob(&tok, t)]}));
                ok = ok && deltas(parser.push(&d.text), lp);
                ok
            });
            let tail = parser.finish();
            deltas(tail, Value::Null);
            let had_calls = calls.get() > 0;
            let finish = move |s: &Summary| if had_calls && s.finish == "stop" { "tool_calls" } else { s.finish };
            finish_stream(&tx, r, |s| chunk(json!({}), Value::Null, Some(finish(s))), pp.include_usage);
        })
        .await?;
        return Ok(SseBody::new(ReceiverStream::new(rx)).into_response());
    }
    let pp = p.clone();
    let (text, lps, summary) = run(&s, prompt, &p, move |st, prompt, lane| {
        let tok = st.engine.get().expect("engine is loaded").tok.clone();
        let (mut text, mut lps) = (String::new(), Vec::new());
        let r = drive(&tok, &prompt, lane, &pp, false, |d| {
            text.push_str(&d.text);
            if let (Some(t), Some(_)) = (d.token, pp.logprobs) {
                lps.push(chat_logprob(&tok, t));
            }
            true
        });
        r.map(|s| (text, lps, s))
    })
    .await?
    .map_err(internal)?;
    let parsed = parse_completion(&text, thinking);
    let finish = if !parsed.tool_calls.is_empty() && summary.finish == "stop" { "tool_calls" } else { summary.finish };
    let mut message = json!({"role": "assistant", "content": parsed.content});
    if let Some(r) = &parsed.reasoning_content {
        message["reasoning_content"] = json!(r);
        message["reasoning"] = json!(r);
    }
    if !parsed.tool_calls.is_empty() {
        message["tool_calls"] = serde_json::to_value(&parsed.tool_calls).map_err(internal)?;
    }
    let logprobs = if p.logprobs.is_some() { json!({"content": lps}) } else { Value::Null };
    let v = json!({"id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}], "usage": usage(&summary)});
    Ok(axum::Json(v).into_response())
}

fn stream_delta(ev: StreamEvent, calls: &std::cell::Cell<usize>) -> Value {
    match ev {
        StreamEvent::Reasoning(r) => json!({"reasoning_content": r, "reasoning": r}),
        StreamEvent::Content(c) => json!({"content": c}),
        StreamEvent::ToolCall(tc) => {
            let mut v = serde_json::to_value(&tc).unwrap_or(Value::Null);
            v["index"] = json!(calls.get());
            calls.set(calls.get() + 1);
            json!({"tool_calls": [v]})
        }
    }
}
