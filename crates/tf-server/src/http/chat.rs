//! `/v1/chat/completions`: the body checked and the messages encoded and tokenized; `respond` does the rest.

use super::api::{Common, warn_unknown};
use super::error::ApiError;
use super::render::Format;
use super::respond::{Prepared, respond};
use super::{AppState, parse_body, tokenize_prompt};
use crate::chat::{ChatMessage, ChatOptions, Tool, check_tools, encode_messages};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
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

/// Prepares a chat request (messages encoded and tokenized, options checked) and hands it to the completion path.
pub async fn chat(State(s): State<Arc<AppState>>, body: Bytes) -> Result<Response, ApiError> {
    let st = s.clone();
    let req = s
        .prepare_request(move || {
            let b: ChatBody = parse_body(&body)?;
            warn_unknown(&body, "/v1/chat/completions", &CHAT_FIELDS);
            let params = b.common.params(if b.logprobs { Some(b.top_logprobs.unwrap_or(0)) } else { None })?;
            let opts = chat_options(&b)?;
            check_tools(&b.tools, b.tool_choice.as_ref()).map_err(|r| ApiError::param(r.param, r.message))?;
            let e = st.engine()?;
            let text = encode_messages(&b.messages, &b.tools, &opts)
                .map_err(|err| ApiError::param("messages", err.to_string()))?;
            let prompt = tokenize_prompt(e, &text, 0, "messages")?;
            params.check_vocab(e.tok.vocab_size())?;
            Ok(Prepared { params, prompt, format: Format::Chat { thinking: opts.thinking } })
        })
        .await?;
    respond(&s, req).await
}
