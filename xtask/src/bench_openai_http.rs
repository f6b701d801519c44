//! The HTTP side of `bench openai`: the model id, `/tokenize`, and one streamed request timed chunk by chunk.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

/// One server: its base URL, the optional API key, and an agent whose 4xx/5xx replies are read, not raised.
#[derive(Clone)]
pub struct Client {
    pub base: String,
    key: Option<String>,
    agent: ureq::Agent,
}

/// What one streamed request measured; times in seconds from just before it was sent.
#[derive(Clone, Debug, Default)]
pub struct Timing {
    pub ttft_s: f64,
    pub last_s: f64,
    pub e2e_s: f64,
    pub chunks: u64,
    pub prompt_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub error: Option<String>,
}

impl Client {
    pub fn new(base: &str, key: Option<String>, timeout: Duration) -> Self {
        let agent =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().into();
        Self { base: base.trim_end_matches('/').to_owned(), key, agent }
    }

    fn post(&self, path: &str, body: &Value) -> Result<ureq::http::Response<ureq::Body>, String> {
        self.post_bytes(path, body.to_string().as_bytes())
    }

    fn post_bytes(&self, path: &str, body: &[u8]) -> Result<ureq::http::Response<ureq::Body>, String> {
        let mut req = self.agent.post(&format!("{}{path}", self.base)).header("content-type", "application/json");
        if let Some(k) = &self.key {
            req = req.header("authorization", &format!("Bearer {k}"));
        }
        req.send(body).map_err(|e| format!("POST {path}: {e}"))
    }

    /// One plain POST of raw bytes: its status and body text; a transport failure is an `Err`.
    pub fn post_text(&self, path: &str, body: &[u8]) -> Result<(u16, String), String> {
        let mut r = self.post_bytes(path, body)?;
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().map_err(|e| format!("POST {path}: reading the reply: {e}"))?;
        Ok((status, text))
    }

    /// A GET: its status, body text and seconds taken; a transport failure is an `Err`.
    pub fn get_text(&self, path: &str) -> Result<(u16, String, f64), String> {
        let t = Instant::now();
        let mut req = self.agent.get(&format!("{}{path}", self.base));
        if let Some(k) = &self.key {
            req = req.header("authorization", &format!("Bearer {k}"));
        }
        let mut r = req.call().map_err(|e| format!("GET {path}: {e}"))?;
        let text = r.body_mut().read_to_string().map_err(|e| format!("GET {path}: {e}"))?;
        Ok((r.status().as_u16(), text, t.elapsed().as_secs_f64()))
    }

    /// The first model `/v1/models` lists.
    pub fn model_id(&self) -> Result<String, String> {
        let mut req = self.agent.get(&format!("{}/v1/models", self.base));
        if let Some(k) = &self.key {
            req = req.header("authorization", &format!("Bearer {k}"));
        }
        let mut r = req.call().map_err(|e| format!("GET /v1/models: {e}"))?;
        let text = r.body_mut().read_to_string().map_err(|e| format!("GET /v1/models: {e}"))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("GET /v1/models: {e}: {text}"))?;
        v["data"][0]["id"].as_str().map(String::from).ok_or_else(|| format!("GET /v1/models lists no model: {text}"))
    }

    /// The first model's `max_model_len` (vLLM's and our `/v1/models` field), when the server says.
    pub fn max_model_len(&self) -> Option<u64> {
        let (_, text, _) = self.get_text("/v1/models").ok()?;
        serde_json::from_str::<Value>(&text).ok()?["data"][0]["max_model_len"].as_u64()
    }

    /// The ids of `text` from `/tokenize` (ours and vLLM's shape: `tokens`), or `None` when the server has none.
    pub fn tokenize(&self, model: &str, text: &str) -> Option<Vec<u32>> {
        let (status, reply) =
            self.post_text("/tokenize", json!({"model": model, "prompt": text}).to_string().as_bytes()).ok()?;
        let v: Value = serde_json::from_str(&reply).ok().filter(|_| status == 200)?;
        v["tokens"].as_array()?.iter().map(|t| t.as_u64().map(|t| t as u32)).collect()
    }

    /// A plain POST of JSON: status and parsed reply (a non-JSON reply becomes a JSON string).
    pub fn post_json(&self, path: &str, body: &Value) -> Result<(u16, Value), String> {
        let (status, text) = self.post_text(path, body.to_string().as_bytes())?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
    }

    /// The token count of `text` from `/tokenize` (ours and vLLM's shape), or `None` when the server has none.
    pub fn count_tokens(&self, model: &str, text: &str) -> Option<u64> {
        self.tokenize(model, text).map(|ids| ids.len() as u64)
    }

    /// Sends one streamed request and times its chunks; a failure lands in `error` with the times so far.
    pub fn stream(&self, path: &str, body: &Value) -> Timing {
        let t0 = Instant::now();
        let mut t = Timing::default();
        if let Err(e) = self.read_stream(path, body, t0, &mut t) {
            t.error = Some(e);
        }
        t.e2e_s = t0.elapsed().as_secs_f64();
        t
    }

    /// Streams a request and hangs up at its first generated chunk: `Ok(true)`; `Ok(false)` if it ended before any.
    pub fn stream_then_hang_up(&self, path: &str, body: &Value) -> Result<bool, String> {
        let mut hung_up = false;
        self.sse(path, body, |v| {
            if !v["error"].is_null() {
                return Err(format!("error chunk: {}", v["error"]));
            }
            hung_up = v["choices"].as_array().is_some_and(|cs| cs.iter().any(has_text));
            Ok(hung_up)
        })?;
        Ok(hung_up)
    }

    /// Posts a streamed request and hands each SSE chunk to `chunk` until it says stop (`true`) or `[DONE]` comes.
    fn sse(
        &self,
        path: &str,
        body: &Value,
        mut chunk: impl FnMut(&Value) -> Result<bool, String>,
    ) -> Result<(), String> {
        let mut r = self.post(path, body)?;
        if r.status().as_u16() != 200 {
            let status = r.status().as_u16();
            let text = r.body_mut().read_to_string().unwrap_or_default();
            return Err(format!("HTTP {status}: {}", text.chars().take(300).collect::<String>()));
        }
        let mut lines = BufReader::new(r.body_mut().as_reader());
        let mut line = String::new();
        loop {
            line.clear();
            if lines.read_line(&mut line).map_err(|e| format!("reading the stream: {e}"))? == 0 {
                return Err("the stream ended without [DONE]".into());
            }
            let Some(data) = line.trim_end().strip_prefix("data:").map(str::trim_start) else { continue };
            if data == "[DONE]" {
                return Ok(());
            }
            let v: Value = serde_json::from_str(data).map_err(|e| format!("bad SSE chunk ({e}): {data}"))?;
            if chunk(&v)? {
                return Ok(());
            }
        }
    }

    fn read_stream(&self, path: &str, body: &Value, t0: Instant, t: &mut Timing) -> Result<(), String> {
        self.sse(path, body, |v| {
            if !v["error"].is_null() {
                return Err(format!("error chunk: {}", v["error"]));
            }
            if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                t.prompt_tokens = u["prompt_tokens"].as_u64();
                t.cached_tokens = u["prompt_tokens_details"]["cached_tokens"].as_u64();
                t.completion_tokens = u["completion_tokens"].as_u64();
            }
            if v["choices"].as_array().is_some_and(|cs| cs.iter().any(has_text)) {
                let now = t0.elapsed().as_secs_f64();
                if t.chunks == 0 {
                    t.ttft_s = now;
                }
                t.last_s = now;
                t.chunks += 1;
            }
            Ok(false)
        })
    }
}

/// Whether a choice carries generated output: completions' `text`, chat's content or reasoning, or a tool call's delta.
fn has_text(c: &Value) -> bool {
    let d = &c["delta"];
    let text = [&c["text"], &d["content"], &d["reasoning_content"], &d["reasoning"]];
    text.iter().any(|s| s.as_str().is_some_and(|s| !s.is_empty()))
        || d["tool_calls"].as_array().is_some_and(|t| !t.is_empty())
}
