//! Prompts for `bench openai`: deterministic text from the repository, distinct per request, sized in tokens.

use crate::bench_openai_http::Client;
use serde_json::json;
use std::path::{Path, PathBuf};

/// Characters per token assumed when the server has no `/tokenize`.
pub const CHARS_PER_TOKEN: f64 = 4.0;

/// The code corpus stops growing past this many characters.
const MAX_CORPUS_CHARS: usize = 4 << 20;

/// How prompts were sized: by the server's tokenizer, or by the estimate.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
    Tokenize,
    Estimate,
}

impl Sizing {
    /// By the server's `/tokenize` where it has one (a long prompt must land inside the context), else estimated.
    pub fn of(client: &Client, model: &str) -> Sizing {
        if client.count_tokens(model, "hello world").is_some() { Sizing::Tokenize } else { Sizing::Estimate }
    }

    pub fn describe(self) -> String {
        match self {
            Sizing::Tokenize => "the server's /tokenize".into(),
            Sizing::Estimate => format!("an estimate of {CHARS_PER_TOKEN} characters per token (no /tokenize)"),
        }
    }
}

/// One kind's text as characters, and the characters per token measured so far (to size the next prompt in one try).
pub struct Corpus {
    pub kind: String,
    chars: Vec<char>,
    ratio: f64,
}

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() && !p.ends_with("target") && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            files(&p, ext, out);
        } else if p.extension().is_some_and(|e| e == ext) {
            out.push(p);
        }
    }
}

fn concat(paths: &[PathBuf]) -> String {
    let mut s = String::new();
    for p in paths {
        s.push_str(&std::fs::read_to_string(p).unwrap_or_default());
        s.push('\n');
        if s.len() > MAX_CORPUS_CHARS {
            break;
        }
    }
    s
}

/// Records shaped like an API payload, one per source file, so structured prompts look like JSON traffic.
fn structured(root: &Path, code: &[PathBuf]) -> String {
    let records: Vec<String> = code
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let first = text.lines().next().unwrap_or("");
            let rel = p.strip_prefix(root).unwrap_or(p).to_string_lossy();
            json!({"id": i, "path": rel, "lines": text.lines().count(), "bytes": text.len(), "summary": first})
                .to_string()
        })
        .collect();
    format!("{{\"records\": [\n{}\n]}}\n", records.join(",\n"))
}

/// The text for `kind` (prose: docs/*.md, code: crates/**/*.rs, structured: JSON records of those files).
pub fn corpus(root: &Path, kind: &str) -> Result<Corpus, String> {
    let mut code = Vec::new();
    files(&root.join("crates"), "rs", &mut code);
    let text = match kind {
        "prose" => {
            let mut docs = Vec::new();
            files(&root.join("docs"), "md", &mut docs);
            docs.push(root.join("README.md"));
            concat(&docs)
        }
        "code" => concat(&code),
        "structured" => structured(root, &code),
        other => return Err(format!("unknown kind `{other}` (prose, code or structured)")),
    };
    let chars: Vec<char> = text.chars().collect();
    if chars.len() < 1000 {
        return Err(format!("the {kind} corpus under {} is too short ({} characters)", root.display(), chars.len()));
    }
    Ok(Corpus { kind: kind.to_owned(), chars, ratio: CHARS_PER_TOKEN })
}

/// What to ask before the text, per kind, so the model has a task and each request a distinct start.
fn header(kind: &str, tag: &str) -> String {
    match kind {
        "code" => format!("// {tag}: continue this Rust source.\n"),
        "structured" => format!("{tag}: continue this JSON document, one record per line.\n"),
        _ => format!("{tag}: continue this documentation.\n\n"),
    }
}

impl Corpus {
    /// `n` characters from `start`, wrapping around, cut back to the last whitespace so words stay whole.
    fn slice(&self, start: usize, n: usize) -> String {
        let len = self.chars.len();
        let mut s: String = (0..n).map(|i| self.chars[(start + i) % len]).collect();
        if let Some(cut) = s.rfind(char::is_whitespace).filter(|&c| c > s.len() / 2) {
            s.truncate(cut);
        }
        s
    }

    /// A prompt of about `target` tokens, tagged with `tag` and starting at a place `seed` picks; returns it and its counted tokens.
    pub fn prompt(
        &mut self,
        client: &Client,
        model: &str,
        sizing: Sizing,
        target: u64,
        tag: &str,
        seed: u64,
    ) -> (String, Option<u64>) {
        let start = (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16) as usize % self.chars.len();
        let head = header(&self.kind, tag);
        let mut n = (target as f64 * self.ratio) as usize;
        let mut best = (head.clone() + &self.slice(start, n), None);
        if sizing == Sizing::Estimate {
            return best;
        }
        // Lengths known to give too few (`lo`) and too many (`hi`) tokens: a guess outside them bisects instead, so cuts at whitespace cannot make it bounce.
        let (mut lo, mut hi) = (0usize, usize::MAX);
        for _ in 0..12 {
            let text = head.clone() + &self.slice(start, n.max(1));
            let Some(count) = client.count_tokens(model, &text) else { return best };
            self.ratio = (text.chars().count() as f64 / count.max(1) as f64).max(0.05);
            let off = count.abs_diff(target);
            if best.1.is_none_or(|b: u64| off < b.abs_diff(target)) {
                best = (text, Some(count));
            }
            if off <= (target / 200).max(2) {
                break;
            }
            if count < target {
                lo = lo.max(n)
            } else {
                hi = hi.min(n)
            }
            let guess = (n as f64 * target as f64 / count.max(1) as f64).ceil() as usize;
            n = match (guess > lo && guess < hi, hi == usize::MAX) {
                (true, _) => guess,
                (false, true) => guess.max(lo + 1),
                (false, false) => lo + (hi - lo) / 2,
            };
            if hi.saturating_sub(lo) <= 1 {
                break;
            }
        }
        best
    }
}
