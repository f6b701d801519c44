//! The ratchet: per-rule problem counts may fall over time but never rise.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::{Problem, Rule, check_tree};

/// File name of the baseline, looked up in the checked root.
pub const BASELINE_FILE: &str = "lean-baseline.txt";

/// A problem count per rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts([usize; Rule::ALL.len()]);

impl Counts {
    /// Tallies problems by rule.
    pub fn from_problems(problems: &[Problem]) -> Self {
        let mut counts = Counts::default();
        for problem in problems {
            counts.0[problem.rule as usize] += 1;
        }
        counts
    }

    /// The count for one rule.
    pub fn get(&self, rule: Rule) -> usize {
        self.0[rule as usize]
    }

    /// Sets the count for one rule.
    pub fn set(&mut self, rule: Rule, count: usize) {
        self.0[rule as usize] = count;
    }

    /// Parses `rule count` lines; blank lines are ignored and unlisted rules count as zero.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut counts = Counts::default();
        let mut seen = [false; Rule::ALL.len()];
        for (index, raw) in text.lines().enumerate() {
            let fail = |reason: String| ParseError { line: index + 1, reason };
            let fields: Vec<&str> = raw.split_whitespace().collect();
            let [name, count] = fields[..] else {
                if fields.is_empty() {
                    continue;
                }
                return Err(fail(format!("expected `rule count`, found `{}`", raw.trim())));
            };
            let rule: Rule = name.parse().map_err(|e| fail(format!("{e}")))?;
            let count = count.parse().map_err(|_| fail(format!("bad count `{count}` for {rule}")))?;
            if std::mem::replace(&mut seen[rule as usize], true) {
                return Err(fail(format!("{rule} is listed twice")));
            }
            counts.set(rule, count);
        }
        Ok(counts)
    }

    /// Reads a baseline file; a missing file means every count is zero.
    pub fn load(path: &Path) -> Result<Self, Error> {
        match fs::read_to_string(path) {
            Ok(text) => Counts::parse(&text).map_err(|source| Error::Baseline { path: path.to_owned(), source }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Counts::default()),
            Err(e) => Err(io_error(e, path)),
        }
    }

    /// Renders every rule as `rule count`, one per line, in `Rule::ALL` order.
    pub fn render(&self) -> String {
        Rule::ALL.iter().map(|&rule| format!("{rule} {}\n", self.get(rule))).collect()
    }
}

/// Why a baseline file could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line of the offending entry.
    pub line: usize,
    /// What was wrong with it.
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// One rule's current count next to its baseline; displays as `rule: N (baseline M)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// The rule counted.
    pub rule: Rule,
    /// Problems found now.
    pub current: usize,
    /// Problems allowed by the baseline.
    pub baseline: usize,
}

impl Tally {
    fn compare(current: &Counts, baseline: &Counts) -> Vec<Tally> {
        Rule::ALL
            .into_iter()
            .map(|rule| Tally { rule, current: current.get(rule), baseline: baseline.get(rule) })
            .collect()
    }

    /// True when the count went up, which fails the check.
    pub fn is_above(&self) -> bool {
        self.current > self.baseline
    }

    /// True when the baseline could be lowered to the current count.
    pub fn is_below(&self) -> bool {
        self.current < self.baseline
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (baseline {})", self.rule, self.current, self.baseline)
    }
}

/// The outcome of checking a tree against a baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Every problem found, sorted.
    pub problems: Vec<Problem>,
    /// One entry per rule, in `Rule::ALL` order.
    pub tallies: Vec<Tally>,
}

impl Report {
    /// Compares problems against baseline counts.
    pub fn new(problems: Vec<Problem>, baseline: &Counts) -> Self {
        let tallies = Tally::compare(&Counts::from_problems(&problems), baseline);
        Report { problems, tallies }
    }

    /// True when no rule's count is above its baseline.
    pub fn passed(&self) -> bool {
        !self.tallies.iter().any(Tally::is_above)
    }

    /// True when some rule's count has dropped below its baseline.
    pub fn can_lower_baseline(&self) -> bool {
        self.tallies.iter().any(Tally::is_below)
    }
}

/// Errors from checking against or updating the baseline.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Reading the tree or reading or writing the baseline failed.
    Io(io::Error),
    /// The baseline file is malformed.
    Baseline {
        /// The baseline file.
        path: PathBuf,
        /// What was wrong with it.
        source: ParseError,
    },
    /// An update would have raised these rules, so the baseline was left unchanged.
    WouldRaise(Vec<Tally>),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Baseline { path, source } => write!(f, "{}: {source}", path.display()),
            Error::WouldRaise(tallies) => {
                let rules: Vec<String> = tallies.iter().map(Tally::to_string).collect();
                write!(f, "refusing to raise the baseline: {}", rules.join(", "))
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Baseline { source, .. } => Some(source),
            Error::WouldRaise(_) => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

fn io_error(e: io::Error, path: &Path) -> Error {
    Error::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Checks the tree under `root` against the baseline at `baseline_path`.
pub fn check(root: &Path, baseline_path: &Path) -> Result<Report, Error> {
    let baseline = Counts::load(baseline_path)?;
    Ok(Report::new(check_tree(root)?, &baseline))
}

/// Writes current counts unless one would rise; returns new counts as `current`, old as `baseline`.
pub fn update_baseline(baseline_path: &Path, problems: &[Problem]) -> Result<Vec<Tally>, Error> {
    let old = Counts::load(baseline_path)?;
    let new = Counts::from_problems(problems);
    let tallies = Tally::compare(&new, &old);
    let raised: Vec<Tally> = tallies.iter().copied().filter(Tally::is_above).collect();
    if !raised.is_empty() {
        return Err(Error::WouldRaise(raised));
    }
    let rendered = new.render();
    if fs::read_to_string(baseline_path).ok().as_deref() != Some(rendered.as_str()) {
        fs::write(baseline_path, rendered).map_err(|e| io_error(e, baseline_path))?;
    }
    Ok(tallies)
}
