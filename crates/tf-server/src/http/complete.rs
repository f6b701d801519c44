//! `/v1/completions`: the body checked and the prompt tokenized; `respond` does the rest.

use super::api::{Common, warn_unknown};
use super::error::ApiError;
use super::render::Format;
use super::respond::{Prepared, respond};
use super::{AppState, parse_body, tokenize_prompt};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use std::sync::Arc;

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

/// Prepares a completions request (a text prompt tokenized after BOS, or ids checked) and hands it to the completion path.
pub async fn completions(State(s): State<Arc<AppState>>, body: Bytes) -> Result<Response, ApiError> {
    let st = s.clone();
    let req = s
        .prepare_request(move || {
            let b: CompletionBody = parse_body(&body)?;
            warn_unknown(&body, "/v1/completions", &["prompt", "logprobs", "echo", "suffix", "best_of"]);
            let params = b.common.params(b.logprobs)?;
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
            params.check_vocab(vocab)?;
            Ok(Prepared { params, prompt, format: Format::Text })
        })
        .await?;
    respond(&s, req).await
}
