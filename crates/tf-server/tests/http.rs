//! The server over real HTTP on loopback: endpoints, streaming shapes, logprobs, stop strings and bad input.

mod common;

use common::{chat_body, get, post, post_raw, server, sse, start};
use serde_json::{Value, json};

#[test]
fn health_models_and_token_endpoints() {
    let b = server();
    assert_eq!(get(b, "/health").0, 200);
    let (s, m) = get(b, "/v1/models");
    assert_eq!(s, 200);
    assert_eq!(serde_json::from_str::<Value>(&m).unwrap()["data"][0]["object"], "model");
    let (s, t) = post(b, "/tokenize", &json!({"prompt": "w5 W5"}));
    assert_eq!(s, 200);
    let ids = t["tokens"].clone();
    let (s, d) = post(b, "/detokenize", &json!({"tokens": ids}));
    assert_eq!((s, d["prompt"].as_str().unwrap()), (200, "w5 W5"));
}

#[test]
fn chat_plain_and_streamed_agree() {
    let b = server();
    let (s, plain) = post(b, "/v1/chat/completions", &chat_body(json!({"logprobs": true, "top_logprobs": 3})));
    assert_eq!(s, 200, "{plain}");
    let choice = &plain["choices"][0];
    assert_eq!(plain["object"], "chat.completion");
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(plain["usage"]["completion_tokens"], 8);
    let lp = &choice["logprobs"]["content"];
    assert_eq!(lp.as_array().unwrap().len(), 8);
    assert_eq!(lp[0]["top_logprobs"].as_array().unwrap().len(), 3);
    assert!(lp[0]["token_id"].is_u64() && lp[0]["logprob"].as_f64().unwrap() <= 0.0);
    let full = format!(
        "{}{}",
        choice["message"]["reasoning_content"].as_str().unwrap_or(""),
        choice["message"]["content"].as_str().unwrap_or("")
    );
    let (s, text) = post_raw(
        b,
        "/v1/chat/completions",
        chat_body(json!({"stream": true, "stream_options": {"include_usage": true}})).to_string().as_bytes(),
        None,
    );
    assert_eq!(s, 200);
    let events = sse(&text);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    let usage = chunks.last().unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 8, "include_usage adds a usage chunk");
    assert_eq!(chunks[chunks.len() - 2]["choices"][0]["finish_reason"], "length");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .map(|ch| {
            format!(
                "{}{}",
                ch["delta"]["reasoning_content"].as_str().unwrap_or(""),
                ch["delta"]["content"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(streamed, full, "streamed deltas add up to the plain reply");
}

#[test]
fn thinking_off_puts_text_in_content_and_completions_work() {
    let b = server();
    let (s, v) = post(b, "/v1/chat/completions", &chat_body(json!({"chat_template_kwargs": {"thinking": false}})));
    assert_eq!(s, 200, "{v}");
    assert!(v["choices"][0]["message"].get("reasoning_content").is_none());
    let (s, c) = post(b, "/v1/completions", &json!({"prompt": "w5 W6 w7", "max_tokens": 6, "temperature": 0}));
    assert_eq!(s, 200, "{c}");
    assert_eq!(c["object"], "text_completion");
    let text = c["choices"][0]["text"].as_str().unwrap().to_string();
    let words: Vec<&str> = text.split_whitespace().collect();
    assert!(words.len() >= 3, "six tokens of the tiny model give at least three words: {text:?}");
    let stop = words[2];
    let (s, cut) =
        post(b, "/v1/completions", &json!({"prompt": "w5 W6 w7", "max_tokens": 6, "temperature": 0, "stop": [stop]}));
    assert_eq!(s, 200);
    assert_eq!(cut["choices"][0]["finish_reason"], "stop");
    let kept = cut["choices"][0]["text"].as_str().unwrap();
    assert_eq!(kept, &text[..text.find(stop).unwrap()], "text ends right before the stop string");
}

#[test]
fn bad_input_gets_openai_shaped_4xx() {
    let b = server();
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"{not json".to_vec(), 400),
        (b"\xff\xfe".to_vec(), 400),
        (json!({"messages": "hello"}).to_string().into_bytes(), 400),
        (json!({"messages": []}).to_string().into_bytes(), 400),
        (chat_body(json!({"n": 0})).to_string().into_bytes(), 400),
        (chat_body(json!({"n": 17})).to_string().into_bytes(), 400),
        (chat_body(json!({"forced_tokens": []})).to_string().into_bytes(), 400),
        (chat_body(json!({"forced_tokens": [1, 2], "n": 2})).to_string().into_bytes(), 400),
        (chat_body(json!({"forced_tokens": [99999999]})).to_string().into_bytes(), 400),
        (chat_body(json!({"reasoning_effort": "extreme"})).to_string().into_bytes(), 400),
        (chat_body(json!({"logprobs": true, "top_logprobs": 21})).to_string().into_bytes(), 400),
        (chat_body(json!({"temperature": 3})).to_string().into_bytes(), 400),
        (chat_body(json!({"max_tokens": 0})).to_string().into_bytes(), 400),
        (json!({"messages": [{"role": "wizard", "content": "x"}]}).to_string().into_bytes(), 400),
        (json!({"messages": [{"role": "user", "content": "w1 ".repeat(300)}]}).to_string().into_bytes(), 400),
    ];
    for (body, want) in cases {
        let (s, text) = post_raw(b, "/v1/chat/completions", &body, None);
        assert_eq!(s, want, "{}: {text}", String::from_utf8_lossy(&body));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{text}");
    }
    assert!(oversized_status(b).starts_with("HTTP/1.1 413"), "a body past the limit is refused up front");
    assert_eq!(get(b, "/health").0, 200, "the server is still up");
}

/// Announces a 17 MiB body, sends a little of it, and reads the status line the server answers with.
fn oversized_status(base: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let mut c = std::net::TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        17 << 20
    );
    c.write_all(head.as_bytes()).unwrap();
    let _ = c.write_all(&[b' '; 4096]);
    let mut line = String::new();
    BufReader::new(c).read_line(&mut line).unwrap();
    line
}

#[test]
fn api_key_is_required_when_set() {
    let b = start(Some("sekret"));
    let body = chat_body(json!({})).to_string();
    assert_eq!(post_raw(&b, "/v1/chat/completions", body.as_bytes(), None).0, 401);
    assert_eq!(post_raw(&b, "/v1/chat/completions", body.as_bytes(), Some("wrong")).0, 401);
    assert_eq!(post_raw(&b, "/v1/chat/completions", body.as_bytes(), Some("sekret")).0, 200);
    assert_eq!(get(&b, "/health").0, 200, "health needs no key");
}

#[test]
fn eight_concurrent_http_requests_equal_their_solo_runs() {
    let b = server();
    let body = |i: usize| {
        let words: Vec<String> = (0..6 + i).map(|k| format!("w{}", 5 + (k * 7 + i * 3) % 200)).collect();
        let mut v = chat_body(json!({"logprobs": true, "top_logprobs": 2, "seed": 77 + i, "max_tokens": 10}));
        v["messages"][0]["content"] = json!(words.join(" "));
        v["temperature"] = json!(if i.is_multiple_of(2) { 0.0 } else { 0.9 });
        v
    };
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("id");
        v.as_object_mut().unwrap().remove("created");
        v["usage"].as_object_mut().unwrap().remove("prompt_tokens_details");
        v
    };
    let solo: Vec<Value> = (0..8).map(|i| strip(post(b, "/v1/chat/completions", &body(i)).1)).collect();
    let handles: Vec<_> =
        (0..8).map(|i| std::thread::spawn(move || post(server(), "/v1/chat/completions", &body(i)).1)).collect();
    let together: Vec<Value> = handles.into_iter().map(|h| strip(h.join().unwrap())).collect();
    assert_eq!(together, solo, "text, logprobs and usage are bit-identical alone and concurrent");
}
