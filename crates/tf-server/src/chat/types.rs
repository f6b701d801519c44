//! OpenAI-style chat request pieces: messages, tool calls, tools, and encoding options.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::ChatError;
use super::pyjson::{self, Ordered};

/// One chat message as an OpenAI client sends it; `role` stays a string so a bad role is a `ChatError`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// vLLM's newer spelling of `reasoning_content`; when both are sent this one wins, as in vLLM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message with plain text content.
    pub fn text(role: &str, content: &str) -> Self {
        Self { role: role.to_string(), content: Some(MessageContent::Text(content.to_string())), ..Self::default() }
    }

    /// The reasoning the encoder sees, honouring the `reasoning` alias.
    pub fn reasoning_text(&self) -> Option<&str> {
        self.reasoning.as_deref().or(self.reasoning_content.as_deref())
    }
}

/// Message content: a string, or a list of typed parts (text and images).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One content part; only `type` and `text` matter to the prompt (an image becomes a placeholder).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, Value>,
}

/// An assistant tool call in OpenAI shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

/// The called function: its name and its arguments as a JSON string.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(deserialize_with = "arguments_as_string")]
    pub arguments: String,
}

fn function_kind() -> String {
    "function".to_string()
}

/// Some clients send arguments as an object; DeepSeek's encoder accepts both, so we keep it as JSON text in key order.
fn arguments_as_string<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    match Ordered::deserialize(de)? {
        Ordered::Str(s) => Ok(s),
        other => Ok(pyjson::dumps_ordered(&other)),
    }
}

/// An OpenAI `tools` entry; `function` is `Ordered` because the prompt embeds it in the client's key order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: Ordered,
}

impl Tool {
    /// Checks the shape DeepSeek's encoder relies on and returns the function name.
    pub fn name(&self) -> Result<String, ChatError> {
        if self.kind != "function" {
            return Err(ChatError::InvalidTool(format!("tool type must be \"function\", got {:?}", self.kind)));
        }
        let name = match &self.function {
            Ordered::Object(entries) => entries.iter().find(|(k, _)| k == "name").map(|(_, v)| v),
            _ => None,
        };
        match name {
            Some(Ordered::Str(name)) if !name.is_empty() => Ok(name.clone()),
            _ => Err(ChatError::InvalidTool("tool function needs a non-empty name".into())),
        }
    }
}

/// Reasoning effort: DeepSeek-V4.1 renders it as a number from 1 to 100.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningEffort {
    Low,
    High,
    Max,
    Budget(u8),
}

impl ReasoningEffort {
    /// The number written into the prompt: low 50, high 75, max 100, from DeepSeek's released V4.1 encoder.
    pub fn budget(self) -> u8 {
        match self {
            Self::Low => 50,
            Self::High => 75,
            Self::Max => 100,
            Self::Budget(n) => n,
        }
    }
}

/// How to encode a conversation; `Default` matches vLLM's V4.1 defaults (thinking on, effort high).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChatOptions {
    pub thinking: bool,
    pub reasoning_effort: Option<ReasoningEffort>,
    pub drop_thinking: bool,
    pub add_bos: bool,
}

impl Default for ChatOptions {
    fn default() -> Self {
        Self { thinking: true, reasoning_effort: None, drop_thinking: true, add_bos: true }
    }
}

impl ChatOptions {
    /// Applies a request's `reasoning_effort`: low, high, max, an integer 1..=100, or "none" (thinking off).
    pub fn set_reasoning_effort(&mut self, value: &Value) -> Result<(), ChatError> {
        let bad = || ChatError::InvalidReasoningEffort(value.to_string());
        self.reasoning_effort = match value {
            Value::Null => None,
            Value::String(s) if s == "none" => {
                self.thinking = false;
                None
            }
            Value::String(s) => Some(match s.as_str() {
                "low" => ReasoningEffort::Low,
                "high" => ReasoningEffort::High,
                "max" => ReasoningEffort::Max,
                _ => return Err(bad()),
            }),
            Value::Number(n) => {
                let n = n.as_u64().filter(|n| (1..=100).contains(n)).ok_or_else(bad)?;
                Some(ReasoningEffort::Budget(n as u8))
            }
            _ => return Err(bad()),
        };
        Ok(())
    }
}
