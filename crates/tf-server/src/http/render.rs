//! The output shapes of both generation endpoints: one choice run to JSON or SSE chunks, and the response around them.

use super::api::GenParams;
use super::drive::{DriveError, Summary, chat_logprob, drive};
use super::error::ApiError;
use crate::chat::{CompletionStream, StreamEvent, parse_completion};
use crate::lanes::{Events, TokenEvent};
use crate::tokenizer::Tokenizer;
use axum::response::sse::Event as Sse;
use serde_json::{Value, json};
use std::convert::Infallible;
use tokio::sync::mpsc;

/// The SSE side of a response, shared by a request's choices.
pub(crate) type Tx = mpsc::Sender<Result<Sse, Infallible>>;

/// Which endpoint's shapes a response takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Format {
    /// `/v1/completions`: plain text, special tokens skipped, completions-format logprobs.
    Text,
    /// `/v1/chat/completions`: reasoning, content and tool calls parsed out of the text (`thinking`: it opens in reasoning).
    Chat { thinking: bool },
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

/// Sends one SSE data line from a blocking thread; false once the client is gone.
pub(crate) fn send(tx: &Tx, v: &Value) -> bool {
    tx.blocking_send(Ok(Sse::default().data(v.to_string()))).is_ok()
}

/// The fixed fields of every chunk and of the whole response.
pub(crate) struct Head {
    format: Format,
    id: String,
    model: String,
    created: u64,
}

impl Head {
    pub fn new(format: Format, model: String) -> Head {
        let prefix = match format {
            Format::Text => "cmpl-",
            Format::Chat { .. } => "chatcmpl-",
        };
        Head { format, id: unique_id(prefix), model, created: now() }
    }

    fn envelope(&self, object: &str, choices: Value) -> Value {
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": choices})
    }

    fn chunk_object(&self) -> &'static str {
        match self.format {
            Format::Text => "text_completion",
            Format::Chat { .. } => "chat.completion.chunk",
        }
    }

    fn text_chunk(&self, i: usize, text: &str, lp: Value, finish: Option<&str>) -> Value {
        self.envelope("text_completion", json!([{"index": i, "text": text, "logprobs": lp, "finish_reason": finish}]))
    }

    fn chat_chunk(&self, i: usize, delta: Value, lp: Value, finish: Option<&str>) -> Value {
        let choice = json!({"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish});
        self.envelope("chat.completion.chunk", json!([choice]))
    }

    /// The streamed usage chunk: no choices, the request's usage.
    pub fn usage_chunk(&self, usage: Value) -> Value {
        let mut v = self.envelope(self.chunk_object(), json!([]));
        v["usage"] = usage;
        v
    }

    /// The non-streamed response: every choice in order and the usage.
    pub fn response(&self, choices: Vec<Value>, usage: Value) -> Value {
        let object = match self.format {
            Format::Text => "text_completion",
            Format::Chat { .. } => "chat.completion",
        };
        let mut v = self.envelope(object, json!(choices));
        v["usage"] = usage;
        v
    }
}

/// Runs one non-streamed choice to its end and shapes it.
pub(crate) fn plain_choice(
    h: &Head,
    i: usize,
    tok: &Tokenizer,
    prompt: &[u32],
    lane: Events,
    p: &GenParams,
) -> Result<(Value, Summary), ApiError> {
    let thinking = match h.format {
        Format::Text => return plain_text(i, tok, prompt, lane, p),
        Format::Chat { thinking } => thinking,
    };
    let (mut text, mut lps) = (String::new(), Vec::new());
    let summary = drive(tok, prompt, lane, p, false, |d| {
        text.push_str(&d.text);
        if let (Some(t), Some(_)) = (d.token, p.logprobs) {
            lps.push(chat_logprob(tok, t));
        }
        true
    })
    .map_err(ApiError::internal)?;
    Ok((message_choice(i, &text, thinking, lps, p, &summary)?, summary))
}

fn plain_text(
    i: usize,
    tok: &Tokenizer,
    prompt: &[u32],
    lane: Events,
    p: &GenParams,
) -> Result<(Value, Summary), ApiError> {
    let (mut text, mut tokens) = (String::new(), Vec::new());
    let summary = drive(tok, prompt, lane, p, true, |d| {
        text.push_str(&d.text);
        tokens.extend(d.token.cloned());
        true
    })
    .map_err(ApiError::internal)?;
    let lp = if p.logprobs.is_some() { completion_logprobs(tok, &tokens) } else { Value::Null };
    Ok((json!({"index": i, "text": text, "logprobs": lp, "finish_reason": summary.finish}), summary))
}

/// One non-streamed chat choice: the completion parsed into reasoning, content and tool calls with unique ids.
fn message_choice(
    i: usize,
    text: &str,
    thinking: bool,
    lps: Vec<Value>,
    p: &GenParams,
    summary: &Summary,
) -> Result<Value, ApiError> {
    let mut parsed = parse_completion(text, thinking);
    for c in &mut parsed.tool_calls {
        c.id = unique_id("call_");
    }
    let finish = if !parsed.tool_calls.is_empty() && summary.finish == "stop" { "tool_calls" } else { summary.finish };
    let mut message = json!({"role": "assistant", "content": parsed.content});
    if let Some(r) = &parsed.reasoning_content {
        message["reasoning_content"] = json!(r);
        message["reasoning"] = json!(r);
    }
    if !parsed.tool_calls.is_empty() {
        message["tool_calls"] = serde_json::to_value(&parsed.tool_calls).map_err(ApiError::internal)?;
    }
    let logprobs = if p.logprobs.is_some() { json!({"content": lps}) } else { Value::Null };
    Ok(json!({"index": i, "message": message, "logprobs": logprobs, "finish_reason": finish}))
}

/// Streams one choice as SSE chunks, its finish chunk last; an error is left for the response's error chunk.
pub(crate) fn stream_choice(
    h: &Head,
    i: usize,
    tok: &Tokenizer,
    prompt: &[u32],
    lane: Events,
    p: &GenParams,
    tx: &Tx,
) -> Result<Summary, DriveError> {
    let thinking = match h.format {
        Format::Text => return stream_text(h, i, tok, prompt, lane, p, tx),
        Format::Chat { thinking } => thinking,
    };
    let mut parser = CompletionStream::new(thinking);
    let mut had_calls = false;
    let mut ok = send(tx, &h.chat_chunk(i, json!({"role": "assistant", "content": ""}), Value::Null, None));
    let deltas = |events: Vec<StreamEvent>, lp: Value, had_calls: &mut bool| -> bool {
        let mut lp = Some(lp).filter(|l| !l.is_null());
        for ev in events {
            *had_calls |= matches!(ev, StreamEvent::ToolCallStart { .. });
            if !send(tx, &h.chat_chunk(i, stream_delta(ev), lp.take().unwrap_or(Value::Null), None)) {
                return false;
            }
        }
        lp.is_none_or(|l| send(tx, &h.chat_chunk(i, json!({"content": ""}), l, None)))
    };
    let r = drive(tok, prompt, lane, p, false, |d| {
        let lp = d
            .token
            .filter(|_| p.logprobs.is_some())
            .map_or(Value::Null, |t| json!({"content": [chat_logprob(tok, t)]}));
        ok = ok && deltas(parser.push(&d.text), lp, &mut had_calls);
        ok
    });
    deltas(parser.finish(), Value::Null, &mut had_calls);
    if let Ok(s) = &r {
        let finish = if had_calls && s.finish == "stop" { "tool_calls" } else { s.finish };
        send(tx, &h.chat_chunk(i, json!({}), Value::Null, Some(finish)));
    }
    r
}

fn stream_text(
    h: &Head,
    i: usize,
    tok: &Tokenizer,
    prompt: &[u32],
    lane: Events,
    p: &GenParams,
    tx: &Tx,
) -> Result<Summary, DriveError> {
    let r = drive(tok, prompt, lane, p, true, |d| {
        let lp = d
            .token
            .filter(|_| p.logprobs.is_some())
            .map_or(Value::Null, |t| completion_logprobs(tok, std::slice::from_ref(t)));
        (d.text.is_empty() && lp.is_null()) || send(tx, &h.text_chunk(i, &d.text, lp, None))
    });
    if let Ok(s) = &r {
        send(tx, &h.text_chunk(i, "", Value::Null, Some(s.finish)));
    }
    r
}

/// A chat delta in OpenAI's shape; a tool call's first delta carries a fresh id, its type and name.
fn stream_delta(ev: StreamEvent) -> Value {
    match ev {
        StreamEvent::Reasoning(r) => json!({"reasoning_content": r, "reasoning": r}),
        StreamEvent::Content(c) => json!({"content": c}),
        StreamEvent::ToolCallStart { index, name } => json!({"tool_calls": [{"index": index, "id": unique_id("call_"),
            "type": "function", "function": {"name": name, "arguments": ""}}]}),
        StreamEvent::ToolCallArgs { index, fragment } => {
            json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        }
    }
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
