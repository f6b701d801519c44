//! GPU self-checks' findings: a table printed last, JSON for the records, and sections that fail alone.

use serde_json::{Map, Value, json};
use std::path::Path;

/// One line of the final table.
#[derive(Debug)]
pub struct Row {
    pub check: String,
    pub case: String,
    pub result: String,
    pub pass: bool,
}

/// Every row and JSON section so far; a failed row or a section error makes the run fail.
#[derive(Debug, Default)]
pub struct Report {
    rows: Vec<Row>,
    json: Map<String, Value>,
}

impl Report {
    /// Records one finding and echoes it at once, so a later crash still leaves it in the log.
    pub fn row(&mut self, check: &str, case: impl Into<String>, result: impl Into<String>, pass: bool) {
        let row = Row { check: check.into(), case: case.into(), result: result.into(), pass };
        println!("[{}] {} {}: {}", if row.pass { "ok" } else { "FAIL" }, row.check, row.case, row.result);
        self.rows.push(row);
    }

    /// Appends `value` to the JSON list `key`.
    pub fn push(&mut self, key: &str, value: Value) {
        let list = self.json.entry(key).or_insert_with(|| Value::Array(vec![]));
        if let Value::Array(items) = list {
            items.push(value);
        }
    }

    /// Sets the JSON field `key`.
    pub fn set(&mut self, key: &str, value: Value) {
        self.json.insert(key.into(), value);
    }

    pub fn passed(&self) -> bool {
        !self.rows.is_empty() && self.rows.iter().all(|r| r.pass)
    }

    /// The table: one line per row, widths from the content.
    pub fn print_table(&self) {
        let w = |f: fn(&Row) -> &str| self.rows.iter().map(|r| f(r).chars().count()).max().unwrap_or(0);
        let (wc, wk) = (w(|r| &r.check), w(|r| &r.case));
        println!("\n{:<6} {:<wc$}  {:<wk$}  result", "", "check", "case");
        for r in &self.rows {
            println!("{:<6} {:<wc$}  {:<wk$}  {}", if r.pass { "ok" } else { "FAIL" }, r.check, r.case, r.result);
        }
        let failed = self.rows.iter().filter(|r| !r.pass).count();
        println!("{} checks, {failed} failed: {}", self.rows.len(), if self.passed() { "PASS" } else { "FAIL" });
    }

    /// Writes the JSON (sections, rows and the verdict) to `path`.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let mut all = self.json.clone();
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| json!({"check": r.check, "case": r.case, "result": r.result, "pass": r.pass}))
            .collect();
        all.insert("rows".into(), Value::Array(rows));
        all.insert("pass".into(), Value::Bool(self.passed()));
        let text = serde_json::to_string_pretty(&Value::Object(all)).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }
}

pub use crate::timing::median;

/// `TF_CHECK_SEED`, else the clock: fresh data each run, printed so a failure can be replayed.
pub fn seed() -> u64 {
    std::env::var("TF_CHECK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    })
}

/// `TF_SECTIONS=a,b`: the names asked for (empty: every section), to split a run across device calls.
pub fn sections_named() -> Vec<String> {
    std::env::var("TF_SECTIONS")
        .map(|s| s.split(',').filter(|n| !n.is_empty()).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Whether section `name` runs: no names were asked for, or one of them starts it.
pub fn picked(only: &[String], name: &str) -> bool {
    only.is_empty() || only.iter().any(|o| name.starts_with(o.as_str()))
}

/// Runs one section, timing it, and records its error or panic as a failed row.
pub fn section(report: &mut Report, name: &str, f: impl FnOnce(&mut Report) -> Result<(), crate::Error>) {
    let t = std::time::Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(report)));
    let failure = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => Some(format!(
            "panicked: {}",
            panic.downcast_ref::<String>().map(String::as_str).or(panic.downcast_ref::<&str>().copied()).unwrap_or("?")
        )),
    };
    if let Some(what) = failure {
        report.row(name, "section", what, false);
    }
    println!("{name} section took {:.1} s", t.elapsed().as_secs_f32());
}

/// Prints the table, writes `$OUT/{file}` when `OUT` is set; the exit code says whether every row passed.
pub fn finish(report: &Report, file: &str) -> std::process::ExitCode {
    report.print_table();
    if let Some(out) = std::env::var_os("OUT") {
        let path = Path::new(&out).join(file);
        match report.write_json(&path) {
            Ok(()) => println!("wrote {}", path.display()),
            Err(e) => {
                println!("FAIL writing {}: {e}", path.display());
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    if report.passed() { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
}
