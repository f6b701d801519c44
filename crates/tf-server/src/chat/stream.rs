//! Incremental completion parsing for SSE: reasoning, content and whole tool calls as text arrives.

use super::dsml::{self, CALLS_CLOSE, CALLS_OPEN, EOS, INVOKE_CLOSE, THINK_END};
use super::parse::to_tool_call;
use super::types::ToolCall;

/// One piece of output, in order; a tool call is emitted once its `</｜DSML｜ invoke>` has arrived.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    Reasoning(String),
    Content(String),
    ToolCall(ToolCall),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Reasoning,
    Content,
    Calls,
    Plain,
}

/// Feed decoded text with `push`, then call `finish`; markers split across pushes are held back.
#[derive(Clone, Debug)]
pub struct CompletionStream {
    state: State,
    buf: String,
    raw_block: String,
    calls: usize,
}

impl CompletionStream {
    /// `thinking` says whether the prompt ended inside `<think>`.
    pub fn new(thinking: bool) -> Self {
        let state = if thinking { State::Reasoning } else { State::Content };
        Self { state, buf: String::new(), raw_block: String::new(), calls: 0 }
    }

    /// Adds decoded text and returns whatever can be emitted safely now.
    pub fn push(&mut self, delta: &str) -> Vec<StreamEvent> {
        self.buf.push_str(delta);
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// Ends the stream: held-back text is released, an unfinished DSML block comes back as content.
    pub fn finish(mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        while self.step(&mut out) {}
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Reasoning => emit_reasoning(&mut out, &rest),
            State::Calls => emit_content(&mut out, &format!("{}{rest}", self.raw_block)),
            State::Content | State::Plain => {
                emit_content(&mut out, rest.strip_suffix(EOS).unwrap_or(&rest));
            }
        }
        out
    }

    /// Makes one transition if the buffer allows it; `false` means wait for more text.
    fn step(&mut self, out: &mut Vec<StreamEvent>) -> bool {
        match self.state {
            State::Reasoning => {
                if let Some(pos) = self.buf.find(THINK_END) {
                    emit_reasoning(out, &self.buf[..pos]);
                    self.buf.drain(..pos + THINK_END.len());
                    self.state = State::Content;
                    return true;
                }
                let keep = held_suffix(&self.buf, &[THINK_END]);
                let ready: String = self.buf.drain(..self.buf.len() - keep).collect();
                emit_reasoning(out, &ready);
                false
            }
            State::Content => {
                if let Some(pos) = self.buf.find(CALLS_OPEN) {
                    let text_end = self.buf[..pos].trim_end().len();
                    emit_content(out, &self.buf[..text_end]);
                    self.raw_block = self.buf[text_end..pos + CALLS_OPEN.len()].to_string();
                    self.buf.drain(..pos + CALLS_OPEN.len());
                    self.state = State::Calls;
                    return true;
                }
                let keep = held_suffix(&self.buf, &[CALLS_OPEN, EOS]);
                let ready_len = self.buf[..self.buf.len() - keep].trim_end().len();
                let ready: String = self.buf.drain(..ready_len).collect();
                emit_content(out, &ready);
                false
            }
            State::Calls => self.step_calls(out),
            State::Plain => {
                let keep = held_suffix(&self.buf, &[EOS]);
                let ready: String = self.buf.drain(..self.buf.len() - keep).collect();
                emit_content(out, &ready);
                false
            }
        }
    }

    fn step_calls(&mut self, out: &mut Vec<StreamEvent>) -> bool {
        let lead = self.buf.len() - self.buf.trim_start().len();
        let body = &self.buf[lead..];
        if body.starts_with(CALLS_CLOSE) {
            let taken: String = self.buf.drain(..lead + CALLS_CLOSE.len()).collect();
            let raw = std::mem::take(&mut self.raw_block);
            if raw.ends_with(CALLS_OPEN) {
                emit_content(out, &format!("{raw}{taken}"));
                self.state = State::Plain;
            } else {
                self.state = State::Content;
            }
            return true;
        }
        if CALLS_CLOSE.starts_with(body) {
            return false;
        }
        let Some(end) = body.find(INVOKE_CLOSE).map(|p| lead + p + INVOKE_CLOSE.len()) else {
            return false;
        };
        match dsml::parse_invoke(&self.buf[lead..end]) {
            Some((invoke, _)) => {
                out.push(StreamEvent::ToolCall(to_tool_call(self.calls, invoke)));
                self.calls += 1;
                let taken: String = self.buf.drain(..end).collect();
                self.raw_block.push_str(&taken);
            }
            None => {
                let raw = format!("{}{}", self.raw_block, self.buf);
                self.buf.clear();
                self.raw_block.clear();
                emit_content(out, &raw);
                self.state = State::Plain;
            }
        }
        true
    }
}

/// Bytes at the end of `buf` that could be the start of one of `markers`, kept for the next push.
fn held_suffix(buf: &str, markers: &[&str]) -> usize {
    let mut keep = 0;
    for marker in markers {
        for (i, _) in buf.char_indices() {
            let tail = &buf[i..];
            if tail.len() > keep && marker.starts_with(tail) {
                keep = tail.len();
                break;
            }
        }
    }
    keep
}

fn emit_reasoning(out: &mut Vec<StreamEvent>, text: &str) {
    if !text.is_empty() {
        out.push(StreamEvent::Reasoning(text.to_string()));
    }
}

fn emit_content(out: &mut Vec<StreamEvent>, text: &str) {
    if !text.is_empty() {
        out.push(StreamEvent::Content(text.to_string()));
    }
}
