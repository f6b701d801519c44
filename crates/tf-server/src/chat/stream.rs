//! Incremental completion parsing for SSE: reasoning, content and tool calls (name, then argument fragments).

use super::dsml::{self, CALLS_CLOSE, CALLS_OPEN, EOS, INVOKE_CLOSE, INVOKE_OPEN, PARAM_CLOSE, PARAM_OPEN, THINK_END};

/// One piece of output, in order; a call starts once proven well formed, then streams argument pieces that join to its JSON.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    Reasoning(String),
    Content(String),
    ToolCallStart { index: usize, name: String },
    ToolCallArgs { index: usize, fragment: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Reasoning,
    Content,
    Calls(Call),
    Plain,
}

/// Where we are inside a DSML calls block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Between,
    Invoke,
    StrValue,
    RawValue,
}

/// Feed decoded text with `push`, then call `finish`; markers split across pushes are held back.
#[derive(Clone, Debug)]
pub struct CompletionStream {
    state: State,
    buf: String,
    /// Text of the calls block not yet shown as a tool call (the open marker, an invoke not started yet).
    pending_raw: String,
    /// Name of the invoke whose start is held until its first parameter header proves it well formed.
    name: Option<String>,
    started: bool,
    params: usize,
    calls: usize,
}

impl CompletionStream {
    /// `thinking` says whether the prompt ended inside `<think>`.
    pub fn new(thinking: bool) -> Self {
        let state = if thinking { State::Reasoning } else { State::Content };
        Self { state, buf: String::new(), pending_raw: String::new(), name: None, started: false, params: 0, calls: 0 }
    }

    /// Adds decoded text and returns whatever can be emitted safely now.
    pub fn push(&mut self, delta: &str) -> Vec<StreamEvent> {
        self.buf.push_str(delta);
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// Ends the stream: held-back text is released; a call cut short is closed so its arguments stay valid JSON.
    pub fn finish(mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        while self.step(&mut out) {}
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Reasoning => emit_reasoning(&mut out, &rest),
            State::Calls(_) => self.bail(&mut out, &rest),
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
                    self.pending_raw = self.buf[text_end..pos + CALLS_OPEN.len()].to_string();
                    self.buf.drain(..pos + CALLS_OPEN.len());
                    self.state = State::Calls(Call::Between);
                    self.calls_in_block_reset();
                    return true;
                }
                let keep = held_suffix(&self.buf, &[CALLS_OPEN, EOS]);
                let ready_len = self.buf[..self.buf.len() - keep].trim_end().len();
                let ready: String = self.buf.drain(..ready_len).collect();
                emit_content(out, &ready);
                false
            }
            State::Calls(c) => match self.step_calls(c, out) {
                Some(progress) => progress,
                None => {
                    let rest = std::mem::take(&mut self.buf);
                    self.bail(out, &rest);
                    self.state = State::Plain;
                    true
                }
            },
            State::Plain => {
                let keep = held_suffix(&self.buf, &[EOS]);
                let ready: String = self.buf.drain(..self.buf.len() - keep).collect();
                emit_content(out, &ready);
                false
            }
        }
    }

    fn calls_in_block_reset(&mut self) {
        self.name = None;
        self.started = false;
        self.params = 0;
    }

    /// Ends a calls block that cannot be read: a started call is closed, the unread text becomes content.
    fn bail(&mut self, out: &mut Vec<StreamEvent>, rest: &str) {
        if self.started {
            let close = if self.state == State::Calls(Call::StrValue) { "\"}" } else { "}" };
            self.args(out, close);
            emit_content(out, rest);
        } else {
            emit_content(out, &format!("{}{rest}", self.pending_raw));
        }
        self.pending_raw.clear();
        self.calls_in_block_reset();
    }

    fn args(&mut self, out: &mut Vec<StreamEvent>, fragment: &str) {
        if !self.started {
            let name = self.name.take().expect("an invoke has a name before its arguments");
            out.push(StreamEvent::ToolCallStart { index: self.calls, name });
            self.started = true;
            self.pending_raw.clear();
        }
        if !fragment.is_empty() {
            out.push(StreamEvent::ToolCallArgs { index: self.calls, fragment: fragment.to_string() });
        }
    }

    /// Takes `n` bytes of the buffer, remembering them while the invoke has not started.
    fn take(&mut self, n: usize) {
        let taken: String = self.buf.drain(..n).collect();
        if !self.started {
            self.pending_raw.push_str(&taken);
        }
    }

    /// One step inside a calls block: `Some(progress)`, or `None` when the text is not DSML.
    fn step_calls(&mut self, c: Call, out: &mut Vec<StreamEvent>) -> Option<bool> {
        let lead =
            if matches!(c, Call::Between | Call::Invoke) { self.buf.len() - self.buf.trim_start().len() } else { 0 };
        let body = &self.buf[lead..];
        match c {
            Call::Between => {
                if body.starts_with(CALLS_CLOSE) {
                    let n = lead + CALLS_CLOSE.len();
                    if self.pending_raw.ends_with(CALLS_OPEN) {
                        let raw: String = self.buf.drain(..n).collect();
                        emit_content(out, &format!("{}{raw}", self.pending_raw));
                        self.pending_raw.clear();
                        self.state = State::Plain;
                    } else {
                        self.buf.drain(..n);
                        self.pending_raw.clear();
                        self.state = State::Content;
                    }
                    return Some(true);
                }
                if let Some(rest) = body.strip_prefix(INVOKE_OPEN) {
                    let Some((name, _)) = rest.split_once("\">") else {
                        let probe = rest.strip_suffix('"').unwrap_or(rest);
                        return (!probe.contains(['"', '<', '\n'])).then_some(false);
                    };
                    if name.is_empty() || name.contains(['"', '<', '\n']) {
                        return None;
                    }
                    self.name = Some(name.to_string());
                    self.take(lead + INVOKE_OPEN.len() + name.len() + 2);
                    self.state = State::Calls(Call::Invoke);
                    return Some(true);
                }
                (CALLS_CLOSE.starts_with(body) || INVOKE_OPEN.starts_with(body)).then_some(false)
            }
            Call::Invoke => {
                if body.starts_with(INVOKE_CLOSE) {
                    let close = if self.params == 0 { "{}" } else { "}" };
                    self.args(out, close);
                    self.buf.drain(..lead + INVOKE_CLOSE.len());
                    self.calls += 1;
                    self.started = false;
                    self.params = 0;
                    self.state = State::Calls(Call::Between);
                    return Some(true);
                }
                if let Some(rest) = body.strip_prefix(PARAM_OPEN) {
                    let Some((key, rest)) = rest.split_once("\" string=\"") else { return Some(false) };
                    let Some((flag, _)) = rest.split_once("\">") else {
                        return ("true\"".starts_with(rest) || "false\"".starts_with(rest)).then_some(false);
                    };
                    let value_open = match flag {
                        "true" => "\"",
                        "false" => "",
                        _ => return None,
                    };
                    let head_len = lead + PARAM_OPEN.len() + key.len() + 10 + flag.len() + 2;
                    let sep = if self.params == 0 { "{" } else { "," };
                    let fragment = format!("{sep}{}:{value_open}", dsml::json_string(key));
                    let next = if flag == "true" { Call::StrValue } else { Call::RawValue };
                    self.buf.drain(..head_len);
                    self.args(out, &fragment);
                    self.params += 1;
                    self.state = State::Calls(next);
                    return Some(true);
                }
                (PARAM_OPEN.starts_with(body) || INVOKE_CLOSE.starts_with(body)).then_some(false)
            }
            Call::StrValue => {
                if let Some(pos) = self.buf.find(PARAM_CLOSE) {
                    let value = format!("{}\"", json_inner(&self.buf[..pos]));
                    self.buf.drain(..pos + PARAM_CLOSE.len());
                    self.args(out, &value);
                    self.state = State::Calls(Call::Invoke);
                    return Some(true);
                }
                let keep = held_suffix(&self.buf, &[PARAM_CLOSE]);
                let ready: String = self.buf.drain(..self.buf.len() - keep).collect();
                self.args(out, &json_inner(&ready));
                Some(false)
            }
            Call::RawValue => {
                let pos = self.buf.find(PARAM_CLOSE);
                pos.map(|pos| {
                    let value = dsml::raw_value(&self.buf[..pos]);
                    self.buf.drain(..pos + PARAM_CLOSE.len());
                    self.args(out, &value);
                    self.state = State::Calls(Call::Invoke);
                    true
                })
                .or(Some(false))
            }
        }
    }
}

/// JSON string escaping without the quotes; escaping is per character, so pieces concatenate to the whole.
fn json_inner(s: &str) -> String {
    let q = dsml::json_string(s);
    q[1..q.len() - 1].to_string()
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
