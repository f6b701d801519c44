//! Shared by the HTTP tests: a tiny checkpoint, a server on a free loopback port, and request helpers.
#![allow(dead_code)]

pub mod family;

use serde_json::{Value, json};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tf_server::http::serve::{ServeConfig, spawn_loopback};

pub fn tiny() -> &'static std::path::Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Tiny, 0, d.path()).unwrap();
        d
    })
    .path()
}

/// Starts a server on the tiny model on a free loopback port and waits until `/health` answers 200.
pub fn start(api_key: Option<&str>) -> String {
    start_with(ServeConfig { api_key: api_key.map(String::from), ..ServeConfig::default() })
}

/// Starts a server with `cfg` (its model defaults to the tiny checkpoint) and waits until it is healthy.
pub fn start_with(mut cfg: ServeConfig) -> String {
    cfg.model_dir.get_or_insert_with(|| tiny().to_path_buf());
    let base = format!("http://{}", spawn_loopback(cfg).unwrap());
    let t = Instant::now();
    while get(&base, "/health").0 != 200 {
        assert!(t.elapsed() < Duration::from_secs(60), "server never became healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
    base
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

pub fn get(base: &str, path: &str) -> (u16, String) {
    match agent().get(&format!("{base}{path}")).call() {
        Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

pub fn post_raw(base: &str, path: &str, body: &[u8], key: Option<&str>) -> (u16, String) {
    let mut req = agent().post(&format!("{base}{path}")).header("content-type", "application/json");
    if let Some(k) = key {
        req = req.header("authorization", &format!("Bearer {k}"));
    }
    let mut r = req.send(body).unwrap();
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

pub fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = post_raw(base, path, body.to_string().as_bytes(), None);
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A server on the small synthetic model (real DeepSeek-V4 tokenizer, 4,096-token context), started once per test binary.
pub fn small() -> &'static str {
    static BASE: OnceLock<(tempfile::TempDir, String)> = OnceLock::new();
    &BASE
        .get_or_init(|| {
            let d = tempfile::tempdir().unwrap();
            tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Small, 0, d.path()).unwrap();
            let base = start_with(ServeConfig { model_dir: Some(d.path().to_path_buf()), ..ServeConfig::default() });
            (d, base)
        })
        .1
}

pub fn server() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| start(None))
}

pub fn chat_body(extra: Value) -> Value {
    let mut b = json!({"model": "tiny", "messages": [{"role": "user", "content": "w1 W2 w3"}], "max_tokens": 8, "temperature": 0});
    b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    b
}

/// SSE `data:` payloads of a streamed response.
pub fn sse(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        .map(str::to_string)
        .collect()
}
