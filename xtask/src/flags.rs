//! What the xtask commands share: the flag loop (`--flag value`, switches, `-h`), numbers and lists, the server flags, receipts.

use std::str::FromStr;

/// Calls `set(flag, value)` for each `--flag value` pair (a switch in `switches` gets ""); `Ok(false)` when help was asked.
pub fn each(
    args: &[String],
    switches: &[&str],
    mut set: impl FnMut(&str, &str) -> Result<(), String>,
) -> Result<bool, String> {
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if matches!(flag.as_str(), "-h" | "--help") {
            return Ok(false);
        }
        if switches.contains(&flag.as_str()) {
            set(flag, "")?;
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        set(flag, v)?;
    }
    Ok(true)
}

/// `v` as a number, or an error naming `flag`.
pub fn num<T: FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{flag} needs a number, got `{v}`"))
}

/// `v` as a non-empty comma-separated list, or an error naming `flag`.
pub fn list<T: FromStr>(flag: &str, v: &str) -> Result<Vec<T>, String> {
    let items: Result<Vec<T>, _> = v.split(',').map(|s| s.trim().parse()).collect();
    items.ok().filter(|i| !i.is_empty()).ok_or_else(|| format!("{flag} needs a comma-separated list, got `{v}`"))
}

/// The error for a flag no command knows.
pub fn unknown(flag: &str, v: &str) -> String {
    if v.is_empty() { format!("unexpected argument `{flag}`") } else { format!("unexpected argument `{flag} {v}`") }
}

/// What every command that drives a server is told: where it is, which model, the API key, how long a request may take.
pub struct Target {
    pub url: String,
    pub model: Option<String>,
    pub api_key: Option<String>,
    pub timeout_s: u64,
}

impl Default for Target {
    fn default() -> Self {
        Target { url: "http://127.0.0.1:8000".into(), model: None, api_key: None, timeout_s: 600 }
    }
}

impl Target {
    /// Takes `--url`, `--model`, `--api-key` and `--timeout-s`; `Ok(false)` for any other flag.
    pub fn take(&mut self, flag: &str, v: &str) -> Result<bool, String> {
        match flag {
            "--url" => self.url = v.into(),
            "--model" => self.model = Some(v.into()),
            "--api-key" => self.api_key = Some(v.into()),
            "--timeout-s" => self.timeout_s = num(flag, v)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// A client for this server, or for `url` with the same key and timeout.
    pub fn client(&self, url: Option<&str>) -> crate::bench_openai_http::Client {
        let timeout = std::time::Duration::from_secs(self.timeout_s);
        crate::bench_openai_http::Client::new(url.unwrap_or(&self.url), self.api_key.clone(), timeout)
    }
}

/// Writes a receipt as pretty JSON to `out` when one was asked for, saying where; the error names the file.
pub fn write_receipt(out: Option<&str>, receipt: &serde_json::Value) -> Result<(), String> {
    let Some(out) = out else { return Ok(()) };
    let text = serde_json::to_string_pretty(receipt).map_err(|e| e.to_string())?;
    std::fs::write(out, text + "\n").map_err(|e| format!("{out}: {e}"))?;
    eprintln!("receipt: {out}");
    Ok(())
}
