//! DeepSeek-V4.1 chat encoding: byte-for-byte against fixtures from the Python encoder, plus the parsers.

use std::path::PathBuf;

use serde_json::{Value, json};
use tf_server::chat::{ChatError, ChatMessage, ChatOptions, Tool, encode_messages, parse_completion};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat")
}

/// Builds options the way the fixture script's request wrapper does.
fn options_from(v: &Value) -> ChatOptions {
    let mut o = ChatOptions::default();
    if let Some(t) = v.get("thinking").and_then(Value::as_bool) {
        o.thinking = t;
    }
    if let Some(d) = v.get("drop_thinking").and_then(Value::as_bool) {
        o.drop_thinking = d;
    }
    if let Some(e) = v.get("reasoning_effort") {
        o.set_reasoning_effort(e).expect("fixture effort");
    }
    o
}

/// Read from text, not via `Value`, so tool schemas keep their key order.
#[derive(serde::Deserialize)]
struct Fixture {
    messages: Vec<ChatMessage>,
    tools: Option<Vec<Tool>>,
    options: Value,
    expected: String,
}

#[test]
fn every_fixture_matches_the_python_encoder() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture_dir())
        .expect("fixture dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 30, "expected the committed fixtures, found {}", paths.len());
    for path in paths {
        let fx: Fixture = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let tools = fx.tools.unwrap_or_default();
        let got = encode_messages(&fx.messages, &tools, &options_from(&fx.options))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(got, fx.expected, "fixture {}", path.display());
    }
}

fn user(text: &str) -> ChatMessage {
    ChatMessage::text("user", text)
}

#[test]
fn invalid_requests_are_clear_errors() {
    let opts = ChatOptions::default();
    let err = encode_messages(&[], &[], &opts).unwrap_err();
    assert_eq!(err, ChatError::Empty);
    let err = encode_messages(&[ChatMessage::text("robot", "x")], &[], &opts).unwrap_err();
    assert!(matches!(err, ChatError::InvalidRole { index: 0, .. }));
    assert!(err.to_string().contains("\"robot\""), "{err}");
    let orphan = [user("a"), ChatMessage::text("assistant", "b"), ChatMessage::text("tool", "r")];
    let err = encode_messages(&orphan, &[], &opts).unwrap_err();
    assert_eq!(err, ChatError::OrphanToolResult { index: 2 });
    let err = encode_messages(&[ChatMessage::text("tool", "r")], &[], &opts).unwrap_err();
    assert_eq!(err, ChatError::OrphanToolResult { index: 0 });
    let no_content = ChatMessage { role: "user".into(), ..ChatMessage::default() };
    let err = encode_messages(&[no_content], &[], &opts).unwrap_err();
    assert!(matches!(err, ChatError::EmptyContent { index: 0, .. }));
    let audio: ChatMessage = serde_json::from_value(json!({"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AA=="}}]}))
    .unwrap();
    let err = encode_messages(&[audio], &[], &opts).unwrap_err();
    assert!(matches!(err, ChatError::UnsupportedContent { .. }));
    let bad_tool: Tool = serde_json::from_str(r#"{"type": "function", "function": {"description": "x"}}"#).unwrap();
    let err = encode_messages(&[user("a")], &[bad_tool], &opts).unwrap_err();
    assert!(matches!(err, ChatError::InvalidTool(_)));
}

#[test]
fn reasoning_effort_values() {
    let mut o = ChatOptions::default();
    for bad in [json!("xhigh"), json!("medium"), json!(0), json!(101), json!(1.5), json!(true)] {
        assert!(o.set_reasoning_effort(&bad).is_err(), "{bad}");
    }
    for (name, budget) in [("low", 50), ("high", 75), ("max", 100)] {
        o.set_reasoning_effort(&json!(name)).unwrap();
        assert_eq!(o.reasoning_effort.map(|e| e.budget()), Some(budget), "{name}");
    }
    o.set_reasoning_effort(&json!(42)).unwrap();
    assert_eq!(o.reasoning_effort.map(|e| e.budget()), Some(42));
    o.set_reasoning_effort(&json!("none")).unwrap();
    assert!(!o.thinking);
}

#[test]
fn arguments_sent_as_an_object_are_accepted() {
    let text = r#"{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": 2}}}]}"#;
    let m: ChatMessage = serde_json::from_str(text).unwrap();
    assert_eq!(m.tool_calls.unwrap()[0].function.arguments, r#"{"z": 1, "a": 2}"#);
}

const CALL_BLOCK: &str = "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter name=\"location\" string=\"true\">Beijing</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"days\" string=\"false\">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"search\">\n<｜DSML｜ parameter name=\"query\" string=\"true\">北京 天气</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

#[test]
fn reasoning_is_split_at_think_end() {
    let p = parse_completion("Let me think.</think>The answer is 4.<｜end▁of▁sentence｜>", true);
    assert_eq!(p.reasoning_content.as_deref(), Some("Let me think."));
    assert_eq!(p.content, "The answer is 4.");
    assert!(p.tool_calls.is_empty());
    let p = parse_completion("still thinking", true);
    assert_eq!(p.reasoning_content.as_deref(), Some("still thinking"));
    assert_eq!(p.content, "");
    let p = parse_completion("Hi there", false);
    assert_eq!(p.reasoning_content, None);
    assert_eq!(p.content, "Hi there");
}

#[test]
fn dsml_block_becomes_tool_calls() {
    let text = format!("I need data.</think>Checking.\n\n{CALL_BLOCK}<｜end▁of▁sentence｜>");
    let p = parse_completion(&text, true);
    assert_eq!(p.content, "Checking.");
    assert_eq!(p.tool_calls.len(), 2);
    assert_eq!(p.tool_calls[0].function.name, "get_weather");
    assert_eq!(p.tool_calls[0].function.arguments, r#"{"location":"Beijing","days":3}"#);
    assert_eq!(p.tool_calls[1].function.arguments, r#"{"query":"北京 天气"}"#);
    assert_ne!(p.tool_calls[0].id, p.tool_calls[1].id);
}

#[test]
fn malformed_dsml_stays_text() {
    let cases = [
        "x\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" string=\"true\">1",
        "x\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">oops</｜DSML｜ invoke>\n</｜DSML｜ calls>",
        "x\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" string=\"maybe\">1</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
        "<｜DSML｜ calls>\n</｜DSML｜ calls>",
        "<｜DSML｜ calls",
    ];
    for text in cases {
        let p = parse_completion(text, false);
        assert!(p.tool_calls.is_empty(), "{text}");
        assert_eq!(p.content, text);
    }
}

/// The server's request body flattens shared fields, which buffers through serde's `Content`; key order must survive it.
#[derive(serde::Deserialize)]
struct FlattenedBody {
    #[serde(flatten)]
    _rest: std::collections::HashMap<String, Value>,
    tools: Vec<Tool>,
}

#[test]
fn tool_schema_key_order_survives_flatten() {
    let text =
        r#"{"model": "m", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}]}"#;
    let body: FlattenedBody = serde_json::from_str(text).unwrap();
    let prompt = encode_messages(&[user("hi")], &body.tools, &ChatOptions::default()).unwrap();
    assert!(prompt.contains(r#"{"name": "f", "parameters": {"z": 1, "a": 2}}"#), "{prompt}");
}
