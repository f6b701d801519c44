//! The completion side: split reasoning from content and read DSML tool calls back into OpenAI shape.

use super::dsml::{self, CALLS_CLOSE, CALLS_OPEN, EOS, THINK_END, THINK_START};
use super::types::{FunctionCall, ToolCall};

/// A finished completion in the shape of an OpenAI assistant message.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedCompletion {
    pub reasoning_content: Option<String>,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
}

/// Parses generated text; `thinking` says whether the prompt ended inside `<think>`.
pub fn parse_completion(text: &str, thinking: bool) -> ParsedCompletion {
    let text = text.strip_suffix(EOS).unwrap_or(text);
    let (reasoning, body) = if thinking {
        let text = text.strip_prefix(THINK_START).unwrap_or(text);
        match text.split_once(THINK_END) {
            Some((r, rest)) => (Some(r.to_string()), rest),
            None => (Some(text.to_string()), ""),
        }
    } else {
        (None, text.strip_prefix(THINK_END).unwrap_or(text))
    };
    let (content, tool_calls) = split_tool_calls(body);
    ParsedCompletion { reasoning_content: reasoning, content, tool_calls }
}

/// Takes the DSML block out of `body`; a block that does not parse stays in the content untouched.
fn split_tool_calls(body: &str) -> (String, Vec<ToolCall>) {
    let Some((before, rest)) = body.split_once(CALLS_OPEN) else {
        return (body.to_string(), Vec::new());
    };
    let Some((block, after)) = rest.split_once(CALLS_CLOSE) else {
        return (body.to_string(), Vec::new());
    };
    let Some(invokes) = dsml::parse_calls_body(block) else {
        return (body.to_string(), Vec::new());
    };
    let calls = invokes.into_iter().enumerate().map(|(i, inv)| to_tool_call(i, inv)).collect();
    let mut content = before.trim_end().to_string();
    content.push_str(after.trim());
    (content, calls)
}

/// Ids are `call_N` by position; the server may swap in globally unique ones.
fn to_tool_call(index: usize, invoke: dsml::ParsedInvoke) -> ToolCall {
    ToolCall {
        id: format!("call_{index}"),
        kind: "function".into(),
        function: FunctionCall { name: invoke.name, arguments: invoke.arguments },
    }
}
