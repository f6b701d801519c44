//! The OpenAI-compatible HTTP server over the lane host (axum on tokio).

pub mod api;
mod chat;
mod complete;
pub mod drive;
pub mod error;
mod render;
mod respond;
pub mod serve;
pub mod text;
pub mod tp;

use crate::lanes::{LaneHost, SubmitError};
use crate::tokenizer::Tokenizer;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use error::ApiError;
use serde_json::{Value, json};
use std::sync::{Arc, OnceLock};
use tokio::sync::Semaphore;

/// A loaded model ready to serve.
pub struct Engine {
    pub host: LaneHost,
    pub tok: Arc<Tokenizer>,
    pub bos: u32,
}

/// Shared server state; `engine` is empty until the model has loaded (health answers 503 meanwhile).
pub struct AppState {
    pub engine: OnceLock<Engine>,
    pub model_id: String,
    pub api_key: Option<String>,
    /// Bounds the requests being parsed and tokenized at once, off the HTTP runtime's threads.
    prep: Arc<Semaphore>,
}

/// Largest request body accepted; a chat history far past the context still fits.
pub const BODY_LIMIT: usize = 16 << 20;

impl AppState {
    /// State for `model_id`, with its model still to load.
    pub fn new(model_id: String, api_key: Option<String>) -> AppState {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        AppState { engine: OnceLock::new(), model_id, api_key, prep: Arc::new(Semaphore::new(cores.clamp(1, 4))) }
    }

    /// Runs a request's parsing and tokenization on the blocking pool, a few at a time, so `/health` never waits on it.
    pub(crate) async fn prepare<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let permit = self.prep.clone().acquire_owned().await.map_err(ApiError::internal)?;
        let job = tokio::task::spawn_blocking(move || {
            let r = work();
            drop(permit);
            r
        });
        job.await.map_err(ApiError::internal)?
    }

    /// [`Self::prepare`] for a generation request: a client that hangs up meanwhile is counted as an `abort`, as one in a lane is.
    pub(crate) async fn prepare_request<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let mut guard = AbortIfDropped(self.engine.get().map(|e| e.host.metrics().clone()), std::time::Instant::now());
        let r = self.prepare(work).await;
        guard.0 = None;
        r
    }

    pub(crate) fn engine(&self) -> Result<&Engine, ApiError> {
        self.engine.get().ok_or_else(|| ApiError::status(StatusCode::SERVICE_UNAVAILABLE, "the model is still loading"))
    }
}

/// Counts an `abort` when dropped armed: the request's handler went away (its client hung up) before it reached a lane.
struct AbortIfDropped(Option<Arc<crate::lanes::Metrics>>, std::time::Instant);

impl Drop for AbortIfDropped {
    fn drop(&mut self) {
        if let Some(m) = &self.0 {
            m.finished(crate::lanes::Outcome::Abort, self.1.elapsed().as_secs_f64());
        }
    }
}

/// All routes, with the API-key check and the body limit.
pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/completions", post(complete::completions))
        .route("/v1/chat/completions", post(chat::chat))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .merge(api)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn(declared_size))
        .layer(middleware::from_fn(json_errors))
        .with_state(state)
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::status(StatusCode::NOT_FOUND, format!("no route for {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::status(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not allowed on {}", uri.path()))
}

/// Rewrites any error reply that is not JSON yet (axum's own rejections: a body over the limit, a bad content type) into OpenAI's shape.
async fn json_errors(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    let status = res.status();
    let is_json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return res;
    }
    let (parts, body) = res.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let message = match text.trim() {
        "" => status.canonical_reason().unwrap_or("error").to_string(),
        t => t.to_string(),
    };
    let mut out = ApiError::status(status, message).into_response();
    for (name, value) in
        parts.headers.iter().filter(|(n, _)| *n != header::CONTENT_TYPE && *n != header::CONTENT_LENGTH)
    {
        out.headers_mut().insert(name.clone(), value.clone());
    }
    out
}

/// Refuses a body whose declared length is past the limit before reading any of it.
async fn declared_size(req: Request, next: Next) -> Response {
    let declared =
        req.headers().get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return ApiError::status(StatusCode::PAYLOAD_TOO_LARGE, format!("request body over {BODY_LIMIT} bytes"))
            .into_response();
    }
    next.run(req).await
}

async fn auth(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &s.api_key {
        let given =
            req.headers().get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(key.as_str()) {
            return ApiError::status(StatusCode::UNAUTHORIZED, "missing or wrong API key").into_response();
        }
    }
    next.run(req).await
}

async fn health(State(s): State<Arc<AppState>>) -> Response {
    match s.engine() {
        Ok(_) => (StatusCode::OK, "ok").into_response(),
        Err(e) => e.into_response(),
    }
}

/// Prometheus text format; the engine's metrics once the model has loaded, and the process's memory always.
async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    let mut text = s.engine.get().map(|e| e.host.metrics().render()).unwrap_or_default();
    if let Some(rss) = resident_bytes(None) {
        text.push_str("# HELP process_resident_memory_bytes Resident memory size in bytes.\n");
        text.push_str(&format!("# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {rss}\n"));
    }
    ([("content-type", "text/plain; version=0.0.4")], text).into_response()
}

/// A process's resident set from /proc (this one for `None`; Linux only, `None` elsewhere): /metrics, the soak and the load test.
pub fn resident_bytes(pid: Option<u32>) -> Option<u64> {
    let status =
        std::fs::read_to_string(pid.map_or("/proc/self/status".into(), |p| format!("/proc/{p}/status"))).ok()?;
    let kib: u64 = status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

async fn models(State(s): State<Arc<AppState>>) -> Response {
    let mut card = json!({"id": s.model_id, "object": "model", "created": 0, "owned_by": "tensorfold"});
    // vLLM's field: the longest prompt plus reply one request may have, once the model has loaded.
    if let Some(e) = s.engine.get() {
        card["max_model_len"] = json!(e.host.max_context());
    }
    axum::Json(json!({"object": "list", "data": [card]})).into_response()
}

/// Parses a JSON body into `T`, turning every failure into an OpenAI-shaped 400.
pub(crate) fn parse_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| ApiError::bad(format!("request body is not UTF-8: {e}")))?;
    serde_json::from_str(text).map_err(|e| ApiError::bad(format!("invalid request JSON: {e}")))
}

/// Tokenizes a prompt, first refusing text whose byte count alone proves it cannot fit (`extra`: ids the server adds).
pub(crate) fn tokenize_prompt(e: &Engine, text: &str, extra: usize, param: &'static str) -> Result<Vec<u32>, ApiError> {
    let max = e.host.max_context();
    if let Some(least) = e.tok.min_tokens(text.len()).map(|n| n + extra)
        && least >= max
    {
        let bytes = text.len();
        return Err(ApiError::param(
            param,
            format!("prompt of at least {least} tokens ({bytes} bytes) does not fit the context of {max} tokens"),
        ));
    }
    e.tok.encode(text, false).map_err(|err| ApiError::param(param, err.to_string()))
}

pub(crate) fn submit_error(e: SubmitError, param: &'static str) -> ApiError {
    match e {
        SubmitError::QueueFull => ApiError::status(StatusCode::TOO_MANY_REQUESTS, e.to_string()),
        SubmitError::Stopped => ApiError::status(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        _ => ApiError::param(param, e.to_string()),
    }
}

async fn tokenize(State(s): State<Arc<AppState>>, body: Bytes) -> Result<Response, ApiError> {
    let st = s.clone();
    s.prepare(move || {
        let e = st.engine()?;
        let v: Value = parse_body(&body)?;
        let text = v
            .get("prompt")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::param("prompt", "`prompt` must be a string"))?;
        let ids = e.tok.encode(text, false).map_err(|err| ApiError::bad(err.to_string()))?;
        Ok(axum::Json(json!({"tokens": ids, "count": ids.len()})).into_response())
    })
    .await
}

async fn detokenize(State(s): State<Arc<AppState>>, body: Bytes) -> Result<Response, ApiError> {
    let st = s.clone();
    s.prepare(move || {
        let e = st.engine()?;
        let v: Value = parse_body(&body)?;
        let ids: Vec<u32> = serde_json::from_value(v.get("tokens").cloned().unwrap_or(Value::Null))
            .map_err(|_| ApiError::param("tokens", "`tokens` must be a list of token ids"))?;
        let vocab = e.tok.vocab_size() as u32;
        if let Some(bad) = ids.iter().find(|&&t| t >= vocab) {
            return Err(ApiError::param("tokens", format!("token id {bad} is outside the vocabulary of {vocab}")));
        }
        let text = e.tok.decode(&ids, false).map_err(|err| ApiError::bad(err.to_string()))?;
        Ok(axum::Json(json!({"prompt": text})).into_response())
    })
    .await
}
