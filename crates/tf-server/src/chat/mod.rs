//! Chat encoding for DeepSeek-V4.1 (no Jinja template exists): our Rust rendition of DeepSeek's Python encoder, checked byte for byte against `tests/fixtures/chat`.

mod dsml;
mod encode;
mod ordered_serde;
mod parse;
mod pyjson;
mod schema;
mod stream;
mod types;

use std::fmt;

pub use dsml::{BOS, EOS, THINK_END, THINK_START};
pub use encode::encode_messages;
pub use parse::{ParsedCompletion, parse_completion};
pub use pyjson::{Ordered, dumps as python_json_dumps, dumps_ordered as python_json_dumps_ordered};
pub use schema::{BadSchema, Refusal, check_tools};
pub use stream::{CompletionStream, StreamEvent};
pub use types::{ChatMessage, ChatOptions, ContentPart, FunctionCall, MessageContent, ReasoningEffort, Tool, ToolCall};

/// Why a chat request cannot be encoded; every variant is the client's fault (HTTP 400).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChatError {
    Empty,
    InvalidRole { index: usize, role: String },
    EmptyContent { index: usize, role: &'static str },
    OrphanToolResult { index: usize },
    InvalidToolCall { index: usize, reason: String },
    UnsupportedContent { index: usize, kind: String },
    InvalidTool(String),
    InvalidReasoningEffort(String),
}

impl fmt::Display for ChatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "messages must not be empty"),
            Self::InvalidRole { index, role } => write!(
                f,
                "messages[{index}]: invalid role {role:?} (expected system, developer, user, assistant or tool)"
            ),
            Self::EmptyContent { index, role } => {
                write!(f, "messages[{index}]: a {role} message needs content")
            }
            Self::OrphanToolResult { index } => {
                write!(f, "messages[{index}]: a tool message must follow an assistant message with tool_calls")
            }
            Self::InvalidToolCall { index, reason } => {
                write!(f, "messages[{index}]: invalid tool call: {reason}")
            }
            Self::UnsupportedContent { index, kind } => {
                write!(f, "messages[{index}]: content part type {kind:?} is not supported (text and images only)")
            }
            Self::InvalidTool(reason) => write!(f, "invalid tool: {reason}"),
            Self::InvalidReasoningEffort(v) => {
                write!(f, "reasoning_effort must be low, high, max, none or an integer 1..=100, got {v}")
            }
        }
    }
}

impl std::error::Error for ChatError {}
