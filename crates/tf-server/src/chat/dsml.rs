//! DeepSeek-V4.1 special tokens and DSML (its tool-call markup), both directions.

use super::pyjson::{self, Ordered};

pub const BOS: &str = "<｜begin▁of▁sentence｜>";
pub const EOS: &str = "<｜end▁of▁sentence｜>";
pub const THINK_START: &str = "<think>";
pub const THINK_END: &str = "</think>";
pub const USER: &str = "<｜User｜>";
pub const ASSISTANT: &str = "<｜Assistant｜>";
pub const SYSTEM: &str = "<｜System｜>";
pub const IMAGE: &str = "<｜deepseek_image｜>";
/// V4.1 spells the DSML tags with a leading space (V4 had `tool_calls`, `invoke`, `parameter`).
pub const CALLS_OPEN: &str = "<｜DSML｜ calls>";
pub const CALLS_CLOSE: &str = "</｜DSML｜ calls>";
pub const INVOKE_OPEN: &str = "<｜DSML｜ invoke name=\"";
pub const INVOKE_CLOSE: &str = "</｜DSML｜ invoke>";
pub const PARAM_OPEN: &str = "<｜DSML｜ parameter name=\"";
pub const PARAM_CLOSE: &str = "</｜DSML｜ parameter>";

const TOOLS_HEAD: &str = "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by writing a \"<｜DSML｜ calls>\" block like the following:\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"$TOOL_NAME\">\n<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n...\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜ invoke>\n</｜DSML｜ calls>\n\nString parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n";
const TOOLS_TAIL: &str =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

/// The tools section appended to the system message: one Python-style JSON schema per line.
pub fn render_tools(functions: &[&Ordered]) -> String {
    let schemas: Vec<String> = functions.iter().map(|f| pyjson::dumps_ordered(f)).collect();
    format!("{TOOLS_HEAD}{}{TOOLS_TAIL}", schemas.join("\n"))
}

/// An assistant's earlier tool calls as the DSML block the model itself would have written.
pub fn render_calls(calls: &[(&str, &str)]) -> String {
    let invokes: Vec<String> = calls
        .iter()
        .map(|(name, args)| format!("{INVOKE_OPEN}{name}\">\n{}\n{INVOKE_CLOSE}", render_arguments(args)))
        .collect();
    format!("\n\n{CALLS_OPEN}\n{}\n{CALLS_CLOSE}", invokes.join("\n"))
}

/// Mirrors DeepSeek's `encode_arguments_to_dsml`: JSON (even double-encoded) objects spread into parameters.
fn render_arguments(args: &str) -> String {
    let fallback = || vec![("arguments".to_string(), Ordered::Str(args.to_string()))];
    let entries = match pyjson::parse_ordered(args) {
        Some(Ordered::Object(e)) => e,
        Some(Ordered::Str(inner)) => match pyjson::parse_ordered(&inner) {
            Some(Ordered::Object(e)) => e,
            _ => fallback(),
        },
        _ => fallback(),
    };
    let params: Vec<String> = entries
        .iter()
        .map(|(k, v)| {
            let (is_str, text) = match v {
                Ordered::Str(s) => ("true", s.clone()),
                other => ("false", pyjson::dumps_ordered(other)),
            };
            format!("{PARAM_OPEN}{k}\" string=\"{is_str}\">{text}{PARAM_CLOSE}")
        })
        .collect();
    params.join("\n")
}

/// A tool call read back from DSML: the function name and its arguments as compact JSON text, in the model's order.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedInvoke {
    pub name: String,
    pub arguments: String,
}

/// Parses the body between `<｜DSML｜ calls>` and `</｜DSML｜ calls>`; `None` when it is not well formed.
pub fn parse_calls_body(body: &str) -> Option<Vec<ParsedInvoke>> {
    let mut rest = body.trim_start();
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (invoke, after) = parse_invoke(rest)?;
        out.push(invoke);
        rest = after.trim_start();
    }
    (!out.is_empty()).then_some(out)
}

/// Parses one `<｜DSML｜ invoke name="…">…</｜DSML｜ invoke>` at the start of `text`, returning what follows.
pub fn parse_invoke(text: &str) -> Option<(ParsedInvoke, &str)> {
    let rest = text.strip_prefix(INVOKE_OPEN)?;
    let (name, rest) = rest.split_once("\">")?;
    if name.is_empty() || name.contains(['"', '<', '\n']) {
        return None;
    }
    let (mut inner, after) = rest.split_once(INVOKE_CLOSE)?;
    let mut fields: Vec<String> = Vec::new();
    loop {
        inner = inner.trim_start();
        if inner.is_empty() {
            break;
        }
        let rest = inner.strip_prefix(PARAM_OPEN)?;
        let (key, rest) = rest.split_once("\" string=\"")?;
        let (flag, rest) = rest.split_once("\">")?;
        let (raw, rest) = rest.split_once(PARAM_CLOSE)?;
        let value = match flag {
            "true" => json_string(raw),
            "false" => raw_value(raw),
            _ => return None,
        };
        fields.push(format!("{}:{value}", json_string(key)));
        inner = rest;
    }
    let invoke = ParsedInvoke { name: name.to_string(), arguments: format!("{{{}}}", fields.join(",")) };
    Some((invoke, after))
}

/// A `string="false"` parameter as JSON: the raw text when it parses, else the raw text as a JSON string.
pub(crate) fn raw_value(raw: &str) -> String {
    match pyjson::parse_ordered(raw) {
        Some(_) => raw.trim().to_string(),
        None => json_string(raw),
    }
}

pub(crate) fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}
