//! The streaming completion parser: reasoning, content and tool-call fragments agree with the one-shot parse.

use tf_server::chat::{CompletionStream, StreamEvent, ToolCall, parse_completion};

const CALL_BLOCK: &str = "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter name=\"location\" string=\"true\">Beijing \"north\"\\</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"days\" string=\"false\">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"search\">\n<｜DSML｜ parameter name=\"query\" string=\"true\">北京 天气\n</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"filters\" string=\"false\">{\"a\": [1, 2]}</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"bad_json\" string=\"false\">not json</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"now\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

fn run_stream(text: &str, thinking: bool, chunk: usize) -> Vec<StreamEvent> {
    let mut s = CompletionStream::new(thinking);
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    for piece in chars.chunks(chunk) {
        out.extend(s.push(&piece.iter().collect::<String>()));
    }
    out.extend(s.finish());
    out
}

fn joined(events: &[StreamEvent], reasoning: bool) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Reasoning(t) if reasoning => Some(t.as_str()),
            StreamEvent::Content(t) if !reasoning => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// Tool calls assembled from start and argument events the way an OpenAI client accumulates deltas by index.
fn assembled(events: &[StreamEvent]) -> Vec<(String, String)> {
    let mut calls: Vec<(String, String)> = Vec::new();
    for e in events {
        match e {
            StreamEvent::ToolCallStart { index, name } => {
                assert_eq!(*index, calls.len(), "indices count up from 0");
                calls.push((name.clone(), String::new()));
            }
            StreamEvent::ToolCallArgs { index, fragment } => calls[*index].1.push_str(fragment),
            _ => {}
        }
    }
    calls
}

fn names_and_args(calls: &[ToolCall]) -> Vec<(String, String)> {
    calls.iter().map(|c| (c.function.name.clone(), c.function.arguments.clone())).collect()
}

#[test]
fn streaming_matches_one_shot_parse_at_every_chunk_size() {
    let text = format!("I need data.</think>Checking.\n\n{CALL_BLOCK}<｜end▁of▁sentence｜>");
    let whole = parse_completion(&text, true);
    assert_eq!(whole.tool_calls.len(), 3);
    assert_eq!(whole.tool_calls[2].function.arguments, "{}");
    for c in &whole.tool_calls {
        serde_json::from_str::<serde_json::Value>(&c.function.arguments).expect("arguments are JSON");
    }
    for chunk in [1, 2, 3, 5, 7, 64, 10_000] {
        let events = run_stream(&text, true, chunk);
        assert_eq!(joined(&events, true), whole.reasoning_content.clone().unwrap(), "chunk {chunk}");
        assert_eq!(joined(&events, false), whole.content, "chunk {chunk}");
        assert_eq!(assembled(&events), names_and_args(&whole.tool_calls), "chunk {chunk}");
    }
    let plain = run_stream("a </thin b <｜DSML｜ c  ", false, 2);
    assert_eq!(joined(&plain, false), "a </thin b <｜DSML｜ c  ");
}

#[test]
fn a_long_string_argument_streams_in_pieces() {
    let value = "line one\nline \"two\" ".repeat(20);
    let text = format!(
        "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"write\">\n<｜DSML｜ parameter name=\"body\" string=\"true\">{value}</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"
    );
    let events = run_stream(&text, false, 4);
    let pieces = events.iter().filter(|e| matches!(e, StreamEvent::ToolCallArgs { .. })).count();
    assert!(pieces > 50, "the value arrives as it is generated, not at the end: {pieces} pieces");
    let calls = assembled(&events);
    let args: serde_json::Value = serde_json::from_str(&calls[0].1).unwrap();
    assert_eq!(args["body"], value.as_str());
    assert_eq!(names_and_args(&parse_completion(&text, false).tool_calls), calls);
}

#[test]
fn malformed_dsml_before_a_call_starts_stays_text() {
    let cases = [
        "x\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">oops</｜DSML｜ invoke>\n</｜DSML｜ calls>",
        "x\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" string=\"maybe\">1</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
        "<｜DSML｜ calls>\n</｜DSML｜ calls>",
        "<｜DSML｜ calls",
        "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"a\nb\">",
    ];
    for text in cases {
        let p = parse_completion(text, false);
        assert!(p.tool_calls.is_empty(), "{text}");
        assert_eq!(p.content, text);
        for chunk in [1, 3, 100] {
            let events = run_stream(text, false, chunk);
            assert!(assembled(&events).is_empty(), "{text}");
            assert_eq!(joined(&events, false), text, "stream {text}");
        }
    }
}

#[test]
fn a_call_cut_short_is_closed_as_valid_json() {
    let text = "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" string=\"true\">hal";
    assert!(
        parse_completion(text, false).tool_calls.is_empty(),
        "the one-shot parse keeps an unfinished block as text"
    );
    let calls = assembled(&run_stream(text, false, 2));
    assert_eq!(calls, vec![("f".to_string(), r#"{"a":"hal"}"#.to_string())], "what streamed stays well formed");
    let junk = "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" string=\"false\">1</｜DSML｜ parameter>\njunk</｜DSML｜ invoke>";
    let events = run_stream(junk, false, 3);
    assert_eq!(assembled(&events), vec![("f".to_string(), r#"{"a":1}"#.to_string())]);
    assert_eq!(joined(&events, false), "\njunk</｜DSML｜ invoke>", "the unreadable rest is content");
}
