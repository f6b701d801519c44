#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod baseline;
mod lexer;
mod walk;

use std::fmt;
use std::io;
use std::path::Path;
use std::str::FromStr;

pub use baseline::{BASELINE_FILE, Counts, Error, ParseError, Report, Tally, check, update_baseline};

/// Files must stay strictly below this many lines.
pub const MAX_LINES: usize = 600;

/// A lean rule; `name()` is the stable spelling used in reports and the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// The file has `MAX_LINES` lines or more.
    FileTooLong,
    /// A `/* ... */` comment, including `/** */` and `/*! */` doc forms.
    BlockComment,
    /// Two or more consecutive lines that start with `//`, `///` or `//!`.
    MultiLineComment,
}

impl Rule {
    /// Every rule, in baseline order.
    pub const ALL: [Rule; 3] = [Rule::FileTooLong, Rule::BlockComment, Rule::MultiLineComment];

    /// The stable name, e.g. `file-too-long`.
    pub const fn name(self) -> &'static str {
        match self {
            Rule::FileTooLong => "file-too-long",
            Rule::BlockComment => "block-comment",
            Rule::MultiLineComment => "multi-line-comment",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for a string that names no rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownRule(pub String);

impl fmt::Display for UnknownRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown rule `{}`", self.0)
    }
}

impl std::error::Error for UnknownRule {}

impl FromStr for Rule {
    type Err = UnknownRule;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Rule::ALL.into_iter().find(|rule| rule.name() == s).ok_or_else(|| UnknownRule(s.to_owned()))
    }
}

/// One rule violation; displays as `path:line: rule`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    /// Path relative to the scanned root, with `/` separators.
    pub path: String,
    /// 1-based line number.
    pub line: usize,
    /// The rule that was broken.
    pub rule: Rule,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path, self.line, self.rule)
    }
}

/// Checks one file's text; `path_label` is reported as-is and its extension picks the lexer.
pub fn check_source(path_label: &str, text: &str) -> Vec<Problem> {
    let problem = |line, rule| Problem { path: path_label.to_owned(), line, rule };
    let mut problems = Vec::new();
    if text.lines().count() >= MAX_LINES {
        problems.push(problem(MAX_LINES, Rule::FileTooLong));
    }
    let comments = lexer::scan(text, lexer::Lang::from_path(path_label));
    problems.extend(comments.block_starts.iter().map(|&line| problem(line, Rule::BlockComment)));
    problems.extend(comment_runs(&comments.leading_line_comments).map(|line| problem(line, Rule::MultiLineComment)));
    problems.sort();
    problems
}

/// Checks every `.rs`, `.cu` and `.cuh` file under `root`, skipping build output and hidden dirs.
pub fn check_tree(root: &Path) -> io::Result<Vec<Problem>> {
    let mut problems = Vec::new();
    for file in walk::source_files(root)? {
        let bytes =
            std::fs::read(&file.path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.path.display())))?;
        problems.extend(check_source(&file.label, &String::from_utf8_lossy(&bytes)));
    }
    problems.sort();
    Ok(problems)
}

/// Yields the first line of each run of two or more consecutive lines in a sorted list.
fn comment_runs(lines: &[usize]) -> impl Iterator<Item = usize> + '_ {
    lines.iter().enumerate().filter_map(|(i, &line)| {
        let starts_run = i == 0 || lines[i - 1] + 1 != line;
        let continues = lines.get(i + 1) == Some(&(line + 1));
        (starts_run && continues).then_some(line)
    })
}
