//! `/v1/chat/completions`: DeepSeek-V4.1 encoding in, reasoning, content and tool calls out, plain or streamed.

use super::api::{Common, GenParams, warn_unknown};
use super::complete::{Tx, Work, collect_choices, internal, now, send, stream_choices, unique_id};
use super::drive::{Summary, chat_logprob, drive, usage};
use super::error::ApiError;
use super::{AppState, parse_body, tokenize_prompt};
use crate::chat::{
    ChatMessage, ChatOptions, CompletionStream, StreamEvent, Tool, check_tools, encode_messages, parse_completion,
};
use crate::lanes::Events;
use crate::tokenizer::Tokenizer;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

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
    tool_choice: Option<Value>,
}

const CHAT_FIELDS: [&str; 8] = [
    "messages",
    "tools",
    "tool_choice",
    "logprobs",
    "top_logprobs",
    "chat_template_kwargs",
    "reasoning_effort",
    "parallel_tool_calls",
];

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

/// The fixed fields of every chunk of one response.
#[derive(Clone)]
struct Head {
    id: String,
    model: String,
    created: u64,
}

impl Head {
    fn chunk(&self, i: usize, delta: Value, logprobs: Value, finish: Option<&str>) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]})
    }
}

pub async fn chat(State(s): State<Arc<AppState>>, body: Bytes) -> Result<Response, ApiError> {
    let st = s.clone();
    let (p, thinking, prompt) = s
        .prepare(move || {
            let b: ChatBody = parse_body(&body)?;
            warn_unknown(&body, "/v1/chat/completions", &CHAT_FIELDS);
            let p = b.common.params(if b.logprobs { Some(b.top_logprobs.unwrap_or(0)) } else { None })?;
            let opts = chat_options(&b)?;
            check_tools(&b.tools, b.tool_choice.as_ref()).map_err(|(param, m)| ApiError::param(param, m))?;
            let e = st.engine()?;
            let text = encode_messages(&b.messages, &b.tools, &opts)
                .map_err(|err| ApiError::param("messages", err.to_string()))?;
            let prompt = tokenize_prompt(e, &text, 0, "messages")?;
            p.check_vocab(e.tok.vocab_size())?;
            Ok((p, opts.thinking, prompt))
        })
        .await?;
    let head = Head { id: unique_id("chatcmpl-"), model: s.model_id.clone(), created: now() };
    if p.stream {
        let (pp, h) = (p.clone(), head.clone());
        let work = move |i: usize, tok: &Tokenizer, prompt: &[u32], lane: Events, tx: &Tx| {
            stream_choice(&h, &pp, thinking, i, tok, prompt, lane, tx)
        };
        let usage_chunk = move |u: Value| {
            let mut v = head.chunk(0, json!({}), Value::Null, None);
            v["choices"] = json!([]);
            v["usage"] = u;
            v
        };
        return stream_choices(&s, prompt, &p, work, usage_chunk).await;
    }
    let pp = p.clone();
    let work: Arc<Work<_>> = Arc::new(move |_, tok, prompt, lane| {
        let (mut text, mut lps) = (String::new(), Vec::new());
        let r = drive(tok, prompt, lane, &pp, false, |d| {
            text.push_str(&d.text);
            if let (Some(t), Some(_)) = (d.token, pp.logprobs) {
                lps.push(chat_logprob(tok, t));
            }
            true
        });
        r.map(|s| (text, lps, s))
    });
    let mut choices = Vec::new();
    let mut summaries = Vec::new();
    for (i, r) in collect_choices(&s, prompt, &p, work).await?.into_iter().enumerate() {
        let (text, lps, summary) = r.map_err(internal)?;
        choices.push(message_choice(i, &text, thinking, lps, &p, &summary)?);
        summaries.push(summary);
    }
    let v = json!({"id": head.id, "object": "chat.completion", "created": head.created, "model": head.model,
        "choices": choices, "usage": usage(&summaries)});
    Ok(axum::Json(v).into_response())
}

/// One non-streamed choice: the completion parsed into reasoning, content and tool calls with unique ids.
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
        message["tool_calls"] = serde_json::to_value(&parsed.tool_calls).map_err(internal)?;
    }
    let logprobs = if p.logprobs.is_some() { json!({"content": lps}) } else { Value::Null };
    Ok(json!({"index": i, "message": message, "logprobs": logprobs, "finish_reason": finish}))
}

/// Streams one choice: a role chunk, then reasoning, content and tool-call deltas (logprobs on each token's first chunk).
#[allow(clippy::too_many_arguments)]
fn stream_choice(
    h: &Head,
    p: &GenParams,
    thinking: bool,
    i: usize,
    tok: &Tokenizer,
    prompt: &[u32],
    lane: Events,
    tx: &Tx,
) -> Result<Summary, String> {
    let mut parser = CompletionStream::new(thinking);
    let mut had_calls = false;
    let mut ok = send(tx, &h.chunk(i, json!({"role": "assistant", "content": ""}), Value::Null, None));
    let deltas = |events: Vec<StreamEvent>, lp: Value, had_calls: &mut bool| -> bool {
        let mut lp = Some(lp).filter(|l| !l.is_null());
        for ev in events {
            *had_calls |= matches!(ev, StreamEvent::ToolCallStart { .. });
            if !send(tx, &h.chunk(i, stream_delta(ev), lp.take().unwrap_or(Value::Null), None)) {
                return false;
            }
        }
        lp.is_none_or(|l| send(tx, &h.chunk(i, json!({"content": ""}), l, None)))
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
        send(tx, &h.chunk(i, json!({}), Value::Null, Some(finish)));
    }
    r
}

/// A delta in OpenAI's shape; a tool call's first delta carries a fresh id, its type and name.
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
