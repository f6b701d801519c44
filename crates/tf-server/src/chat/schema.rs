//! Checks `tools` and `tool_choice` as OpenAI's API does before a request runs: a bad schema or choice is a 400, not a silent pass.

use super::Tool;
use serde_json::{Map, Value};

/// The JSON Schema type names.
const TYPES: [&str; 7] = ["object", "array", "string", "number", "integer", "boolean", "null"];

/// A refusal: the request field at fault (`tools` or `tool_choice`) and why; the message is the 400's text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub param: &'static str,
    pub message: String,
}

/// A `parameters` schema that is not valid JSON Schema: where in it, and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{at} {why}")]
pub struct BadSchema {
    pub at: String,
    pub why: String,
}

fn bad_schema<T>(at: &str, why: impl Into<String>) -> Result<T, BadSchema> {
    Err(BadSchema { at: at.to_string(), why: why.into() })
}

/// Checks every tool (type, name, unique names, description, a JSON Schema object for `parameters`) and `tool_choice`.
pub fn check_tools(tools: &[Tool], choice: Option<&Value>) -> Result<(), Refusal> {
    let mut names = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let at = |m: String| Refusal { param: "tools", message: format!("tools[{i}]: {m}") };
        let name = t.name().map_err(|e| at(e.to_string()))?;
        if names.contains(&name) {
            return Err(at(format!("function name {name:?} is used twice")));
        }
        let f = serde_json::to_value(&t.function).map_err(|e| at(e.to_string()))?;
        if f.get("description").is_some_and(|d| !d.is_string()) {
            return Err(at("function.description must be a string".into()));
        }
        match f.get("parameters") {
            None | Some(Value::Null) => {}
            Some(p) => {
                check_root(p).map_err(|m| at(format!("function {name:?} has an invalid parameters schema: {m}")))?
            }
        }
        names.push(name);
    }
    check_choice(&names, choice)
}

/// `tool_choice`: `none`, `auto`, `required` (needs tools) or `{"type": "function", "function": {"name": N}}` naming a tool.
fn check_choice(names: &[String], choice: Option<&Value>) -> Result<(), Refusal> {
    let bad = |message: String| Err(Refusal { param: "tool_choice", message });
    match choice {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if s == "none" || s == "auto" => Ok(()),
        Some(Value::String(s)) if s == "required" && names.is_empty() => {
            bad("tool_choice \"required\" needs at least one tool in `tools`".into())
        }
        Some(Value::String(s)) if s == "required" => Ok(()),
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
            match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
                Some(n) if names.iter().any(|t| t == n) => Ok(()),
                Some(n) => bad(format!("tool_choice names function {n:?}, which is not in `tools`")),
                None => bad("tool_choice.function.name must be a string".into()),
            }
        }
        Some(other) => {
            bad(format!("tool_choice must be \"none\", \"auto\", \"required\" or a function object, got {other}"))
        }
    }
}

/// The root of `parameters`: an object schema, as OpenAI requires.
fn check_root(v: &Value) -> Result<(), BadSchema> {
    let Value::Object(m) = v else { return bad_schema("the schema", format!("must be a JSON object, got {v}")) };
    if let Some(t) = m.get("type")
        && t != "object"
    {
        return bad_schema("the root schema", format!("must have type \"object\", got {t}"));
    }
    check_schema(v, "parameters")
}

/// One (sub)schema: a boolean or an object whose known keywords have the types JSON Schema gives them.
fn check_schema(v: &Value, path: &str) -> Result<(), BadSchema> {
    let m = match v {
        Value::Bool(_) => return Ok(()),
        Value::Object(m) => m,
        other => return bad_schema(path, format!("must be a schema object or boolean, got {other}")),
    };
    for (k, val) in m {
        let at = format!("{path}.{k}");
        match k.as_str() {
            "type" => check_type(val, &at)?,
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                let o = object(val, &at)?;
                o.iter().try_for_each(|(name, s)| check_schema(s, &format!("{at}.{name}")))?;
            }
            "items" if val.is_array() => schemas(val, &at, false)?,
            "items"
            | "additionalProperties"
            | "additionalItems"
            | "unevaluatedProperties"
            | "not"
            | "contains"
            | "propertyNames"
            | "if"
            | "then"
            | "else" => check_schema(val, &at)?,
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => schemas(val, &at, true)?,
            "required" => unique_strings(val, &at)?,
            "enum" if val.as_array().is_none_or(|a| a.is_empty()) => {
                return bad_schema(&at, "must be a non-empty array");
            }
            "description" | "title" | "pattern" | "format" | "$ref" | "$schema" | "$id" if !val.is_string() => {
                return bad_schema(&at, "must be a string");
            }
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" if !val.is_number() => {
                return bad_schema(&at, "must be a number");
            }
            "multipleOf" if !val.as_f64().is_some_and(|x| x > 0.0) => {
                return bad_schema(&at, "must be a number above 0");
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties"
                if !val.is_u64() =>
            {
                return bad_schema(&at, "must be a non-negative integer");
            }
            _ => {}
        }
    }
    Ok(())
}

fn object<'v>(v: &'v Value, at: &str) -> Result<&'v Map<String, Value>, BadSchema> {
    v.as_object().ok_or_else(|| BadSchema { at: at.into(), why: format!("must be an object, got {v}") })
}

fn check_type(v: &Value, at: &str) -> Result<(), BadSchema> {
    let known = |t: &Value| t.as_str().is_some_and(|s| TYPES.contains(&s));
    let ok = match v {
        Value::String(_) => known(v),
        Value::Array(a) => !a.is_empty() && a.iter().all(known),
        _ => false,
    };
    if ok { Ok(()) } else { bad_schema(at, format!("must be one of {TYPES:?} or a list of them, got {v}")) }
}

fn schemas(v: &Value, at: &str, non_empty: bool) -> Result<(), BadSchema> {
    let a = v.as_array().ok_or_else(|| BadSchema { at: at.into(), why: "must be an array of schemas".into() })?;
    if non_empty && a.is_empty() {
        return bad_schema(at, "must not be empty");
    }
    a.iter().enumerate().try_for_each(|(i, s)| check_schema(s, &format!("{at}[{i}]")))
}

fn unique_strings(v: &Value, at: &str) -> Result<(), BadSchema> {
    let a =
        v.as_array().ok_or_else(|| BadSchema { at: at.into(), why: "must be an array of property names".into() })?;
    for (i, s) in a.iter().enumerate() {
        if !s.is_string() {
            return bad_schema(&format!("{at}[{i}]"), format!("must be a string, got {s}"));
        }
        if a[..i].contains(s) {
            return bad_schema(at, format!("names {s} twice"));
        }
    }
    Ok(())
}
