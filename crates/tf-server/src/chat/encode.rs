//! Chat messages to the DeepSeek-V4.1 prompt string, following DeepSeek's `encode_messages` step by step.

use super::ChatError;
use super::dsml::{self, ASSISTANT, BOS, EOS, IMAGE, SYSTEM, THINK_END, THINK_START, USER};
use super::pyjson::Ordered;
use super::types::{ChatMessage, ChatOptions, MessageContent, ReasoningEffort, Tool};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    System,
    Developer,
    User,
    Assistant,
}

/// A user turn is a list of blocks because V4.1 has no tool role: results fold into the user turn.
#[derive(Clone, Debug)]
enum Block {
    Text(String),
    ToolResult { call_id: String, content: String },
}

/// One message after validation and DeepSeek's preprocessing (tool merge, tool attachment).
#[derive(Clone, Debug)]
struct Turn<'a> {
    role: Role,
    content: String,
    blocks: Vec<Block>,
    tools: Vec<&'a Ordered>,
    calls: Vec<(&'a str, &'a str, &'a str)>,
    reasoning: Option<String>,
}

impl Turn<'_> {
    fn new(role: Role, content: String) -> Self {
        Turn { role, content, blocks: Vec::new(), tools: Vec::new(), calls: Vec::new(), reasoning: None }
    }
}

/// Encodes a conversation (and the request's tools) exactly as DeepSeek's V4.1 encoder does.
pub fn encode_messages(messages: &[ChatMessage], tools: &[Tool], options: &ChatOptions) -> Result<String, ChatError> {
    if messages.is_empty() {
        return Err(ChatError::Empty);
    }
    let mut turns = build_turns(messages)?;
    attach_tools(&mut turns, tools)?;
    sort_tool_results(&mut turns);
    let drop = options.drop_thinking && tools.is_empty();
    if options.thinking && drop {
        turns = drop_old_thinking(turns);
    }
    let mut prompt = if options.add_bos { BOS.to_string() } else { String::new() };
    for index in 0..turns.len() {
        render(index, &turns, options.thinking, drop, options.reasoning_effort, &mut prompt);
    }
    Ok(prompt)
}

/// Validates messages and merges tool results (and adjacent user text) into user turns.
fn build_turns(messages: &[ChatMessage]) -> Result<Vec<Turn<'_>>, ChatError> {
    let mut turns: Vec<Turn<'_>> = Vec::with_capacity(messages.len());
    let mut open_calls = false;
    for (index, msg) in messages.iter().enumerate() {
        let text = content_text(index, msg)?;
        match msg.role.as_str() {
            "system" => turns.push(Turn::new(Role::System, text.unwrap_or_default())),
            "developer" => match text {
                Some(t) if !t.is_empty() => turns.push(Turn::new(Role::Developer, t)),
                _ => return Err(ChatError::EmptyContent { index, role: "developer" }),
            },
            "user" => {
                let text = text.ok_or(ChatError::EmptyContent { index, role: "user" })?;
                push_user_block(&mut turns, Block::Text(text));
            }
            "tool" => {
                if !open_calls {
                    return Err(ChatError::OrphanToolResult { index });
                }
                let content = text.ok_or(ChatError::EmptyContent { index, role: "tool" })?;
                let call_id = msg.tool_call_id.clone().unwrap_or_default();
                push_user_block(&mut turns, Block::ToolResult { call_id, content });
                continue;
            }
            "assistant" => turns.push(assistant_turn(index, msg, text)?),
            other => {
                return Err(ChatError::InvalidRole { index, role: other.to_string() });
            }
        }
        open_calls = msg.role == "assistant" && turns.last().is_some_and(|t| !t.calls.is_empty());
    }
    Ok(turns)
}

fn assistant_turn<'a>(index: usize, msg: &'a ChatMessage, text: Option<String>) -> Result<Turn<'a>, ChatError> {
    let mut turn = Turn::new(Role::Assistant, text.unwrap_or_default());
    turn.reasoning = msg.reasoning_text().map(str::to_string);
    for call in msg.tool_calls.iter().flatten() {
        if call.function.name.is_empty() {
            return Err(ChatError::InvalidToolCall { index, reason: "function name is empty".into() });
        }
        let f = &call.function;
        turn.calls.push((call.id.as_str(), f.name.as_str(), f.arguments.as_str()));
    }
    Ok(turn)
}

/// DeepSeek's `merge_tool_messages`: consecutive user-side messages become one user turn.
fn push_user_block(turns: &mut Vec<Turn<'_>>, block: Block) {
    match turns.last_mut() {
        Some(last) if last.role == Role::User => last.blocks.push(block),
        _ => {
            let mut turn = Turn::new(Role::User, String::new());
            turn.blocks.push(block);
            turns.push(turn);
        }
    }
}

/// Flattens content as vLLM's V4.1 wrapper does: parts joined by a blank line, images as a placeholder.
fn content_text(index: usize, msg: &ChatMessage) -> Result<Option<String>, ChatError> {
    let parts = match &msg.content {
        None => return Ok(None),
        Some(MessageContent::Text(s)) => return Ok(Some(s.clone())),
        Some(MessageContent::Parts(parts)) => parts,
    };
    let mut texts = Vec::with_capacity(parts.len());
    for part in parts {
        match part.kind.as_str() {
            "text" => texts.push(part.text.clone().unwrap_or_default()),
            "image_url" | "input_image" | "image_pil" => texts.push(IMAGE.to_string()),
            other => {
                return Err(ChatError::UnsupportedContent { index, kind: other.to_string() });
            }
        }
    }
    Ok(Some(texts.join("\n\n")))
}

/// vLLM puts request tools on the first system message, inserting an empty one when there is none.
fn attach_tools<'a>(turns: &mut Vec<Turn<'a>>, tools: &'a [Tool]) -> Result<(), ChatError> {
    if tools.is_empty() {
        return Ok(());
    }
    for tool in tools {
        tool.name()?;
    }
    let at = match turns.iter().position(|t| t.role == Role::System) {
        Some(at) => at,
        None => {
            turns.insert(0, Turn::new(Role::System, String::new()));
            0
        }
    };
    turns[at].tools = tools.iter().map(|t| &t.function).collect();
    Ok(())
}

/// DeepSeek's `sort_tool_results_by_call_order`: results follow the order of the calls that asked for them.
fn sort_tool_results(turns: &mut [Turn<'_>]) {
    let mut order: Vec<&str> = Vec::new();
    for turn in turns.iter_mut() {
        if turn.role == Role::Assistant && !turn.calls.is_empty() {
            order = turn.calls.iter().map(|c| c.0).collect();
        } else if turn.role == Role::User {
            let rank = |b: &Block| match b {
                Block::ToolResult { call_id, .. } if !call_id.is_empty() => {
                    order.iter().rposition(|id| id == call_id).unwrap_or(0)
                }
                _ => 0,
            };
            let mut results: Vec<Block> =
                turn.blocks.iter().filter(|b| matches!(b, Block::ToolResult { .. })).cloned().collect();
            if results.len() < 2 || order.iter().all(|id| id.is_empty()) {
                continue;
            }
            results.sort_by_key(rank);
            let mut sorted = results.into_iter();
            for block in turn.blocks.iter_mut() {
                if matches!(block, Block::ToolResult { .. }) {
                    *block = sorted.next().unwrap_or_else(|| block.clone());
                }
            }
        }
    }
}

/// V4.1 counts a system message after the first as a user turn.
fn last_user_index(turns: &[Turn<'_>]) -> Option<usize> {
    turns.iter().enumerate().rev().find_map(|(i, t)| {
        let user_like = matches!(t.role, Role::User | Role::Developer) || (t.role == Role::System && i > 0);
        user_like.then_some(i)
    })
}

/// DeepSeek's `_drop_thinking_messages`: before the last user turn, reasoning and developer turns go.
fn drop_old_thinking(turns: Vec<Turn<'_>>) -> Vec<Turn<'_>> {
    let last = last_user_index(&turns);
    let mut kept = Vec::with_capacity(turns.len());
    for (i, mut turn) in turns.into_iter().enumerate() {
        let at_or_after = last.is_none_or(|l| i >= l);
        match turn.role {
            Role::User | Role::System => kept.push(turn),
            _ if at_or_after => kept.push(turn),
            Role::Assistant => {
                turn.reasoning = None;
                kept.push(turn);
            }
            Role::Developer => {}
        }
    }
    kept
}

/// DeepSeek's `render_message` for one turn, appended to `out`.
fn render(
    index: usize,
    turns: &[Turn<'_>],
    thinking: bool,
    drop: bool,
    effort: Option<ReasoningEffort>,
    out: &mut String,
) {
    let turn = &turns[index];
    let last_user = last_user_index(turns);
    if index == 0 && (thinking || turn.role == Role::System) {
        out.push_str(SYSTEM);
    }
    if index == 0 && thinking {
        let budget = effort.unwrap_or(ReasoningEffort::High).budget();
        out.push_str(&format!(
            "Reasoning Effort: {budget} (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
        ));
    }
    match turn.role {
        Role::System => {
            if index > 0 {
                out.push_str(SYSTEM);
            }
            out.push_str(&turn.content);
            if !turn.tools.is_empty() {
                out.push_str("\n\n");
                out.push_str(&dsml::render_tools(&turn.tools));
            }
        }
        Role::Developer => {
            out.push_str(USER);
            out.push_str(&turn.content);
        }
        Role::User => {
            out.push_str(USER);
            let parts: Vec<String> = turn
                .blocks
                .iter()
                .map(|b| match b {
                    Block::Text(t) => t.clone(),
                    Block::ToolResult { content, .. } => format!("<tool_result>{content}</tool_result>"),
                })
                .collect();
            out.push_str(&parts.join("\n\n"));
        }
        Role::Assistant => {
            if thinking && (!drop || last_user.is_none_or(|l| index > l)) {
                out.push_str(turn.reasoning.as_deref().unwrap_or(""));
                out.push_str(THINK_END);
            }
            out.push_str(&turn.content);
            if !turn.calls.is_empty() {
                let calls: Vec<(&str, &str)> = turn.calls.iter().map(|c| (c.1, c.2)).collect();
                out.push_str(&dsml::render_calls(&calls));
            }
            out.push_str(EOS);
        }
    }
    let is_last = index + 1 == turns.len();
    if !is_last && turns[index + 1].role != Role::Assistant {
        return;
    }
    let opens_reply = matches!(turn.role, Role::User | Role::Developer)
        || (turn.role == Role::System && index > 0)
        || (is_last && matches!(turn.role, Role::System | Role::Assistant));
    if opens_reply {
        out.push_str(ASSISTANT);
        let think = thinking && (!drop || last_user.is_none_or(|l| index >= l));
        out.push_str(if think { THINK_START } else { THINK_END });
    }
}
