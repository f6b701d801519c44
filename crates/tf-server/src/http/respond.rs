//! The one completion path: a prepared request's choices submitted, run on blocking threads and answered plain or as SSE.

use super::api::GenParams;
use super::drive::usage;
use super::error::ApiError;
use super::render::{Format, Head, plain_choice, stream_choice};
use super::{AppState, submit_error};
use crate::lanes::{Canceller, Events};
use axum::response::sse::{Event as Sse, Sse as SseBody};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// A validated, tokenized request: everything the completion path needs, whichever endpoint it came in on.
pub(crate) struct Prepared {
    pub params: GenParams,
    pub prompt: Vec<u32>,
    pub format: Format,
}

/// Submits one lane request per choice before any runs, so a full queue refuses the request as a whole.
fn submit_all(s: &AppState, prompt: &[u32], p: &GenParams, format: Format) -> Result<Vec<Events>, ApiError> {
    let host = &s.engine()?.host;
    // A refused prompt names the field it came in: `prompt` on completions, `messages` on chat.
    let param = if matches!(format, Format::Text) { "prompt" } else { "messages" };
    (0..p.n).map(|i| host.submit(p.request(prompt.to_vec(), i)).map_err(|e| submit_error(e, param))).collect()
}

/// Cancels a plain request's lanes when its handler is dropped (the client hung up); harmless once they have ended.
struct CancelOnDrop(Vec<Canceller>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(Canceller::cancel);
    }
}

/// Answers a prepared request: streamed if it asked, else one JSON body once every choice has ended.
pub(crate) async fn respond(s: &Arc<AppState>, req: Prepared) -> Result<Response, ApiError> {
    let head = Arc::new(Head::new(req.format, s.model_id.clone()));
    let lanes = submit_all(s, &req.prompt, &req.params, req.format)?;
    let tok = s.engine()?.tok.clone();
    let (prompt, p) = (Arc::new(req.prompt), Arc::new(req.params));
    if p.stream {
        return Ok(stream(head, lanes, tok, prompt, p));
    }
    let _hang_up = CancelOnDrop(lanes.iter().map(Events::canceller).collect());
    let mut handles = Vec::new();
    for (i, lane) in lanes.into_iter().enumerate() {
        let (h, tok, prompt, p) = (head.clone(), tok.clone(), prompt.clone(), p.clone());
        handles.push(tokio::task::spawn_blocking(move || plain_choice(&h, i, &tok, &prompt, lane, &p)));
    }
    let (mut choices, mut summaries) = (Vec::new(), Vec::new());
    for h in handles {
        let (choice, summary) = h.await.map_err(ApiError::internal)??;
        choices.push(choice);
        summaries.push(summary);
    }
    Ok(axum::Json(head.response(choices, usage(&summaries))).into_response())
}

/// Streams every choice as server-sent events; after all end, the usage chunk (if asked) or the error, and `[DONE]`.
fn stream(
    head: Arc<Head>,
    lanes: Vec<Events>,
    tok: Arc<crate::tokenizer::Tokenizer>,
    prompt: Arc<Vec<u32>>,
    p: Arc<GenParams>,
) -> Response {
    let (tx, rx) = mpsc::channel(64);
    let handles: Vec<_> = lanes
        .into_iter()
        .enumerate()
        .map(|(i, lane)| {
            let (h, tok, prompt, p, tx) = (head.clone(), tok.clone(), prompt.clone(), p.clone(), tx.clone());
            tokio::task::spawn_blocking(move || stream_choice(&h, i, &tok, &prompt, lane, &p, &tx))
        })
        .collect();
    tokio::spawn(async move {
        let (mut done, mut failed) = (Vec::new(), None);
        for h in handles {
            match h.await {
                Ok(Ok(summary)) => done.push(summary),
                Ok(Err(e)) => failed = Some(e.to_string()),
                Err(e) => failed = Some(e.to_string()),
            }
        }
        let last = match failed {
            Some(e) => Some(json!({"error": {"message": e, "type": "server_error", "param": null, "code": null}})),
            None => p.include_usage.then(|| head.usage_chunk(usage(&done))),
        };
        if let Some(v) = last {
            let _ = tx.send(Ok(Sse::default().data(v.to_string()))).await;
        }
        let _ = tx.send(Ok(Sse::default().data("[DONE]"))).await;
    });
    SseBody::new(ReceiverStream::new(rx)).into_response()
}
