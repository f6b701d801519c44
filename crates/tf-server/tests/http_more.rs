//! The server over real HTTP: several choices, teacher forcing, tool-call fragments, metrics, the prompt cache, cancellation.

mod common;

use common::{chat_body, get, post, post_raw, server, small, sse, start_with};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tf_server::http::serve::ServeConfig;
use tf_server::lanes::Limits;

fn chunks(text: &str) -> Vec<Value> {
    let events = sse(text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{text}");
    events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect()
}

fn metric(base: &str, name: &str) -> f64 {
    let (s, text) = get(base, "/metrics");
    assert_eq!(s, 200);
    let line = text
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .unwrap_or_else(|| panic!("{name} in {text}"));
    line[name.len() + 1..].parse().unwrap()
}

#[test]
fn several_choices_plain_and_streamed() {
    let b = server();
    let body = chat_body(json!({"n": 3, "temperature": 0.9, "seed": 11, "max_tokens": 5}));
    let (s, v) = post(b, "/v1/chat/completions", &body);
    assert_eq!(s, 200, "{v}");
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.iter().map(|c| c["index"].as_u64().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(v["usage"]["completion_tokens"], 15, "five tokens per choice");
    let (_, one) =
        post(b, "/v1/chat/completions", &chat_body(json!({"temperature": 0.9, "seed": 11, "max_tokens": 5})));
    assert_eq!(one["choices"][0]["message"], choices[0]["message"], "choice 0 keeps the request's seed");
    let mut stream = chat_body(json!({"n": 2, "stream": true, "stream_options": {"include_usage": true}}));
    stream["max_tokens"] = json!(4);
    let (s, text) = post_raw(b, "/v1/chat/completions", stream.to_string().as_bytes(), None);
    assert_eq!(s, 200);
    let all = chunks(&text);
    for i in 0..2 {
        let finishes =
            all.iter().filter(|c| c["choices"][0]["index"] == i && c["choices"][0]["finish_reason"].is_string());
        assert_eq!(finishes.count(), 1, "choice {i} ends once");
    }
    assert_eq!(all.last().unwrap()["usage"]["completion_tokens"], 8, "the usage chunk comes after both choices");
}

#[test]
fn forced_tokens_return_the_greedy_logprobs() {
    let b = server();
    let (s, greedy) = post(b, "/v1/chat/completions", &chat_body(json!({"logprobs": true, "top_logprobs": 2})));
    assert_eq!(s, 200, "{greedy}");
    let lps = greedy["choices"][0]["logprobs"]["content"].as_array().unwrap().clone();
    let ids: Vec<u64> = lps.iter().map(|t| t["token_id"].as_u64().unwrap()).collect();
    let body = chat_body(json!({"forced_tokens": ids, "logprobs": true, "top_logprobs": 2, "max_tokens": 1}));
    let (s, forced) = post(b, "/v1/chat/completions", &body);
    assert_eq!(s, 200, "{forced}");
    assert_eq!(forced["choices"][0]["logprobs"]["content"], json!(lps), "teacher-forced == greedy, bit for bit");
    assert_eq!(forced["choices"][0]["message"], greedy["choices"][0]["message"]);
    let (s, c) = post(b, "/v1/completions", &json!({"prompt": "w5 W6", "forced_tokens": [7, 8], "foo_unknown": 1}));
    assert_eq!(s, 200, "{c}");
    let lp = &c["choices"][0]["logprobs"];
    assert_eq!(lp["token_ids"], json!([7, 8]));
    assert!(lp["token_logprobs"].as_array().unwrap().iter().all(|l| l.as_f64().unwrap() <= 0.0));
    assert!(metric(b, "tf:generation_tokens_total") >= 2.0);
}

const TOOL_TEXT: &str = "Let me look.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter name=\"city\" string=\"true\">Paris</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"days\" string=\"false\">2</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"get_time\">\n<｜DSML｜ parameter name=\"zone\" string=\"true\">CET</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜>";

#[test]
fn tool_calls_stream_as_fragments_with_unique_ids() {
    let b = small();
    let (s, t) = post(b, "/tokenize", &json!({"prompt": TOOL_TEXT}));
    assert_eq!(s, 200, "{t}");
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]);
    let body =
        json!({"messages": [{"role": "user", "content": "Weather?"}], "tools": tools, "forced_tokens": t["tokens"]});
    let (s, v) = post(b, "/v1/chat/completions", &body);
    assert_eq!(s, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["reasoning_content"], "Let me look.");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    let plain: Vec<(String, String)> = calls
        .iter()
        .map(|c| (c["function"]["name"].as_str().unwrap().into(), c["function"]["arguments"].as_str().unwrap().into()))
        .collect();
    assert_eq!(plain[0], ("get_weather".into(), r#"{"city":"Paris","days":2}"#.into()));
    let mut stream = body.clone();
    stream["stream"] = json!(true);
    let (s, text) = post_raw(b, "/v1/chat/completions", stream.to_string().as_bytes(), None);
    assert_eq!(s, 200);
    let mut streamed: Vec<(String, String)> = Vec::new();
    let mut ids: Vec<String> = calls.iter().map(|c| c["id"].as_str().unwrap().to_string()).collect();
    let mut fragments = 0;
    for c in chunks(&text) {
        for tc in c["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if let Some(id) = tc["id"].as_str() {
                assert_eq!(i, streamed.len());
                ids.push(id.to_string());
                streamed.push((tc["function"]["name"].as_str().unwrap().into(), String::new()));
            }
            fragments += 1;
            streamed[i].1.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
        }
        if c["choices"][0]["finish_reason"].is_string() {
            assert_eq!(c["choices"][0]["finish_reason"], "tool_calls");
        }
    }
    assert_eq!(streamed, plain, "fragments assemble to the plain reply's calls");
    assert!(fragments > 4, "arguments arrive in pieces: {fragments} deltas");
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 4, "every call id differs, across responses too: {ids:?}");
    assert!(ids.iter().all(|id| id.starts_with("call_")));
}

#[test]
fn a_repeated_long_prompt_is_served_from_the_prompt_cache() {
    let limits = Limits { prefix_block: 16, ..Limits::default() };
    let b = start_with(ServeConfig { limits, ..ServeConfig::default() });
    let words: Vec<String> = (0..60).map(|k| format!("w{}", 10 + k * 3)).collect();
    let mut body = chat_body(json!({"logprobs": true, "top_logprobs": 2, "temperature": 0.7, "seed": 3}));
    body["messages"][0]["content"] = json!(words.join(" "));
    let (_, first) = post(&b, "/v1/chat/completions", &body);
    let (_, second) = post(&b, "/v1/chat/completions", &body);
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    let prompt = second["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(cached >= 16 && cached < prompt && cached % 16 == 0, "{cached} of {prompt}");
    assert_eq!(second["choices"], first["choices"], "the cached run equals the fresh one");
    assert_eq!(metric(&b, "tf:prefix_cache_hits_total"), cached as f64);
}

#[test]
fn a_client_that_disconnects_frees_its_lane() {
    use std::io::{Read, Write};
    let limits = Limits { max_lanes: 1, ..Limits::default() };
    let b = start_with(ServeConfig { limits, ..ServeConfig::default() });
    let body =
        chat_body(json!({"stream": true, "max_tokens": 200, "chat_template_kwargs": {"thinking": false}})).to_string();
    let mut c = std::net::TcpStream::connect(b.trim_start_matches("http://")).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(body.as_bytes()).unwrap();
    let mut first = [0u8; 256];
    let n = c.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    drop(c);
    let t = Instant::now();
    while metric(&b, "tf:request_success_total{finished_reason=\"abort\"}") < 1.0 {
        assert!(t.elapsed() < Duration::from_secs(60), "the cancelled request never left its lane");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(metric(&b, "tf:generation_tokens_total") < 200.0, "generation stopped early");
    let (s, v) = post(&b, "/v1/chat/completions", &chat_body(json!({"max_tokens": 2})));
    assert_eq!((s, v["usage"]["completion_tokens"].as_u64()), (200, Some(2)), "the one lane serves the next request");
    let t = Instant::now();
    while metric(&b, "tf:num_requests_running") != 0.0 {
        assert!(t.elapsed() < Duration::from_secs(60), "the running gauge never settled");
        std::thread::sleep(Duration::from_millis(20));
    }
}
