//! What careless and hostile clients found (issue 23): hang-ups, oversized prompts, tiny temperatures, loose validation, error shapes.

mod common;

use common::{chat_body, get, post, post_raw, server, small, start_with};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use tf_server::http::serve::ServeConfig;
use tf_server::lanes::Limits;

fn metric(base: &str, name: &str) -> f64 {
    let (_, text) = get(base, "/metrics");
    let line = text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '));
    line.map_or(0.0, |l| l[name.len() + 1..].parse().unwrap())
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(60), "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends a request head and body on a raw connection and returns it, so the test decides when the client hangs up.
fn raw_post(base: &str, path: &str, body: &str) -> std::net::TcpStream {
    let mut c = std::net::TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(body.as_bytes()).unwrap();
    c
}

#[test]
fn a_plain_client_that_hangs_up_frees_its_lane() {
    let limits = Limits { max_lanes: 1, ..Limits::default() };
    let b = start_with(ServeConfig { limits, ..ServeConfig::default() });
    let abort = "tf:request_success_total{finished_reason=\"abort\"}";
    let length = "tf:request_success_total{finished_reason=\"length\"}";
    for path in ["/v1/chat/completions", "/v1/completions"] {
        let mut body = chat_body(json!({"max_tokens": 200, "chat_template_kwargs": {"thinking": false}}));
        if path == "/v1/completions" {
            body = json!({"prompt": "w1 W2 w3", "max_tokens": 200, "temperature": 0});
        }
        let aborted = metric(&b, abort);
        let c = raw_post(&b, path, &body.to_string());
        wait_for("the request never got its lane", || metric(&b, "tf:num_requests_running") == 1.0);
        let tokens = metric(&b, "tf:generation_tokens_total");
        drop(c);
        wait_for("the hung-up request kept its lane", || metric(&b, "tf:num_requests_running") == 0.0);
        assert_eq!(metric(&b, abort), aborted + 1.0, "{path}: counted as an abort");
        assert_eq!(metric(&b, length), 0.0, "{path}: not run to max_tokens");
        assert!(metric(&b, "tf:generation_tokens_total") - tokens < 200.0, "{path}: generation stopped early");
    }
    let (s, v) = post(&b, "/v1/chat/completions", &chat_body(json!({"max_tokens": 2})));
    assert_eq!((s, v["usage"]["completion_tokens"].as_u64()), (200, Some(2)), "the one lane serves the next request");
}

#[test]
fn oversized_prompts_are_refused_while_health_stays_instant() {
    let b = small();
    let huge = "x".repeat(15_000_000);
    let clients: Vec<_> = (0..2)
        .map(|i| {
            let (b, huge) = (b.to_string(), huge.clone());
            std::thread::spawn(move || {
                let body = json!({"messages": [{"role": "user", "content": huge}], "seed": i});
                post_raw(&b, "/v1/chat/completions", body.to_string().as_bytes(), None)
            })
        })
        .collect();
    let mut worst = Duration::ZERO;
    while clients.iter().any(|c| !c.is_finished()) {
        let t = Instant::now();
        assert_eq!(get(b, "/health").0, 200);
        worst = worst.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(2));
    }
    for c in clients {
        let (s, text) = c.join().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(s, 400, "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("does not fit the context of 4096 tokens") && msg.contains("bytes"), "{msg}");
        assert_eq!(v["error"]["param"], "messages");
    }
    eprintln!("worst /health latency while two 15 MB prompts were refused: {worst:?}");
    assert!(worst < Duration::from_millis(500), "/health waited {worst:?}");
    let (s, v) = post(b, "/tokenize", &json!({"prompt": "fn main() {}"}));
    assert_eq!((s, v["count"].as_u64().is_some_and(|n| n > 0)), (200, true), "{v}");
}

#[test]
fn a_tiny_temperature_samples_the_greedy_reply() {
    let b = server();
    let (_, greedy) = post(b, "/v1/chat/completions", &chat_body(json!({"max_tokens": 6})));
    for t in [1e-45, 1e-38, 1e-8] {
        let (s, v) = post(b, "/v1/chat/completions", &chat_body(json!({"max_tokens": 6, "temperature": t, "seed": 4})));
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["choices"][0]["message"], greedy["choices"][0]["message"], "temperature {t}");
    }
}

fn refused(body: Value, path: &str, param: &str, says: &str) {
    let (s, v) = post(server(), path, &body);
    assert_eq!(s, 400, "{body} → {v}");
    assert_eq!(v["error"]["param"], param, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains(says), "{msg:?} should say {says:?}");
}

fn tool(name: &str, parameters: Value) -> Value {
    json!({"type": "function", "function": {"name": name, "parameters": parameters}})
}

#[test]
fn what_openai_refuses_is_refused() {
    let chat = "/v1/chat/completions";
    let with = |extra: Value| chat_body(extra);
    let schemas = [
        (json!("not a schema"), "must be a JSON object"),
        (json!({"type": "objekt"}), "must have type \"object\""),
        (json!({"type": "object", "properties": []}), "properties must be an object"),
        (json!({"type": "object", "properties": {"a": {"type": "strin"}}}), "properties.a.type"),
        (json!({"type": "object", "properties": {"a": 5}}), "properties.a must be a schema"),
        (json!({"type": "object", "required": "a"}), "required must be an array"),
        (json!({"type": "object", "properties": {"a": {"enum": []}}}), "enum must be a non-empty array"),
    ];
    for (params, says) in schemas {
        refused(with(json!({"tools": [tool("f", params)]})), chat, "tools", says);
    }
    let two = json!([tool("f", json!({"type": "object"})), tool("f", json!({}))]);
    refused(with(json!({"tools": two})), chat, "tools", "used twice");
    let one = json!([tool("get_time", json!({"type": "object", "properties": {"tz": {"type": "string"}}}))]);
    let missing = json!({"type": "function", "function": {"name": "get_weather"}});
    refused(with(json!({"tools": one, "tool_choice": missing})), chat, "tool_choice", "not in `tools`");
    refused(with(json!({"tool_choice": "required"})), chat, "tool_choice", "needs at least one tool");
    refused(with(json!({"tools": one, "tool_choice": "sometimes"})), chat, "tool_choice", "must be");
    refused(with(json!({"stream_options": {"include_usage": true}})), chat, "stream_options", "only allowed");
    refused(with(json!({"logit_bias": {"abc": 5}})), chat, "logit_bias", "keys must be token ids");
    refused(with(json!({"logit_bias": {"5": 101}})), chat, "logit_bias", "[-100, 100]");
    refused(with(json!({"logit_bias": {"5": "up"}})), chat, "logit_bias", "must be a number");
    refused(with(json!({"logit_bias": {"999999": 1}})), chat, "logit_bias", "outside the vocabulary");
    let completion = json!({"prompt": "w1", "logit_bias": [1, 2]});
    refused(completion, "/v1/completions", "logit_bias", "must be an object");
    let fine = with(json!({"tools": one, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}));
    assert_eq!(post(server(), chat, &fine).0, 200, "a valid named choice is served");
    let fine = with(json!({"stream_options": null, "tool_choice": "auto"}));
    assert_eq!(post(server(), chat, &fine).0, 200, "null stream_options and auto are fine");
}

#[test]
fn logit_bias_moves_the_greedy_choice_and_the_logprobs() {
    let b = server();
    let body = |bias: Value| json!({"prompt": "w1 W2 w3", "max_tokens": 4, "temperature": 0, "logprobs": 1, "logit_bias": bias});
    let (_, plain) = post(b, "/v1/completions", &body(json!({})));
    let ids = plain["choices"][0]["logprobs"]["token_ids"].clone();
    let first = ids[0].as_u64().unwrap();
    let pick = if first == 77 { 78 } else { 77 };
    let (s, up) = post(b, "/v1/completions", &body(json!({pick.to_string(): 100})));
    assert_eq!(s, 200, "{up}");
    assert_eq!(up["choices"][0]["logprobs"]["token_ids"], json!([pick, pick, pick, pick]), "+100 wins every step");
    let lp = up["choices"][0]["logprobs"]["token_logprobs"][0].as_f64().unwrap();
    assert!(lp > -1e-3, "the biased distribution is what logprobs report: {lp}");
    let (_, down) = post(b, "/v1/completions", &body(json!({first.to_string(): -100})));
    assert_ne!(down["choices"][0]["logprobs"]["token_ids"][0].as_u64(), Some(first), "-100 bans the greedy token");
    let (_, again) = post(b, "/v1/completions", &body(json!({})));
    assert_eq!(again["choices"][0]["logprobs"]["token_ids"], ids, "a bias lasts one request");
}

fn json_error(status: u16, text: &str, want: u16) -> Value {
    assert_eq!(status, want, "{text}");
    let v: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("a JSON body for {want}: {text:?}"));
    assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(v["error"]["type"].is_string(), "{v}");
    v
}

#[test]
fn every_error_is_openai_shaped_json() {
    let b = server();
    let (s, text) = get(b, "/v1/nothing-here");
    json_error(s, &text, 404);
    let (s, text) = get(b, "/v1/chat/completions");
    json_error(s, &text, 405);
    let mut c = std::net::TcpStream::connect(b.trim_start_matches("http://")).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    c.write_all(head.as_bytes()).unwrap();
    let piece = vec![b' '; 1 << 20];
    for _ in 0..17 {
        if c.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).is_err() || c.write_all(&piece).is_err() {
            break;
        }
        let _ = c.write_all(b"\r\n");
    }
    let _ = c.write_all(b"0\r\n\r\n");
    let mut reply = Vec::new();
    let _ = c.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or_else(|| panic!("a reply: {reply:?}"));
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body.split("\r\n").nth(1).unwrap_or_default().to_string()
    } else {
        body.to_string()
    };
    json_error(413, &body, 413);
}

#[test]
fn eight_hung_up_plain_clients_give_back_all_eight_lanes() {
    let b = start_with(ServeConfig::default());
    let abort = "tf:request_success_total{finished_reason=\"abort\"}";
    let body = json!({"prompt": "w1 W2 w3", "max_tokens": 1000, "temperature": 0.5, "seed": 1}).to_string();
    let clients: Vec<_> = (0..8).map(|_| raw_post(&b, "/v1/completions", &body)).collect();
    wait_for("eight lanes never ran", || metric(&b, "tf:num_requests_running") == 8.0);
    let before = metric(&b, "tf:generation_tokens_total");
    let t = Instant::now();
    drop(clients);
    wait_for("hung-up clients kept their lanes", || metric(&b, "tf:num_requests_running") == 0.0);
    let freed = t.elapsed();
    let after = metric(&b, "tf:generation_tokens_total");
    assert_eq!(metric(&b, abort), 8.0, "every hang-up counts as an abort");
    assert_eq!(metric(&b, "tf:request_success_total{finished_reason=\"length\"}"), 0.0);
    let t = Instant::now();
    let (s, v) = post(&b, "/v1/completions", &json!({"prompt": "w5", "max_tokens": 2, "temperature": 0}));
    assert_eq!((s, v["usage"]["completion_tokens"].as_u64()), (200, Some(2)), "{v}");
    eprintln!(
        "8 hung-up clients: lanes free {freed:?} after the hang-up, {} tokens generated meanwhile; next request {:?}",
        after - before,
        t.elapsed()
    );
}

#[test]
fn a_prompt_past_the_context_names_the_field_it_came_in() {
    let ids = vec![5u32; 5000];
    refused(json!({"prompt": ids, "max_tokens": 1}), "/v1/completions", "prompt", "does not fit the context");
    let long = "w1 w2 ".repeat(3000);
    refused(
        chat_body(json!({"messages": [{"role": "user", "content": long}]})),
        "/v1/chat/completions",
        "messages",
        "does not fit",
    );
}

#[test]
fn a_client_gone_before_its_request_is_parsed_counts_as_an_abort() {
    let b = small();
    let abort = "tf:request_success_total{finished_reason=\"abort\"}";
    let before = metric(b, abort);
    // Four prompts that must be tokenized (under the 256-bytes-a-token bound) hold every parsing slot for a while.
    let big = chat_body(json!({"messages": [{"role": "user", "content": "x ".repeat(450_000)}]})).to_string();
    let blockers: Vec<_> = (0..4).map(|_| raw_post(b, "/v1/chat/completions", &big)).collect();
    std::thread::sleep(Duration::from_millis(100));
    let waiting = raw_post(b, "/v1/chat/completions", &chat_body(json!({"max_tokens": 2})).to_string());
    std::thread::sleep(Duration::from_millis(100));
    drop(waiting);
    wait_for("the request dropped while waiting to be parsed was never counted", || metric(b, abort) == before + 1.0);
    drop(blockers);
}
