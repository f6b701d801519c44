//! `cargo xtask bench openai`: TTFT, prefill and decode rates of any OpenAI-compatible server, per prompt length, concurrency and kind.

use crate::bench_openai_http::{Client, Timing};
use crate::bench_openai_prompts::{Corpus, Sizing, corpus};
use crate::flags::{Target, each, list, num, unknown, write_receipt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::io::IsTerminal;
use std::time::{Instant, SystemTime};

const USAGE: &str = "\
usage: cargo xtask bench openai [--url URL] [--model NAME] [--api-key KEY] [--endpoint completions|chat]
         [--prompt-tokens 2048,8192] [--concurrency 1,2,4,8] [--kinds prose,code,structured]
         [--max-tokens N] [--requests-per-stream N] [--temperature T] [--ignore-eos] [--timeout-s S] [--out FILE]
         [--plot FILE.png]
  defaults: --url http://127.0.0.1:8000, the first model of /v1/models, completions, 2048,8192 tokens,
  concurrency 1,2,4,8, all three kinds, 128 max tokens, 2 requests per stream, temperature 0, timeout 600 s";

struct Options {
    target: Target,
    chat: bool,
    prompt_tokens: Vec<u64>,
    concurrency: Vec<usize>,
    kinds: Vec<String>,
    max_tokens: u64,
    requests_per_stream: usize,
    temperature: f64,
    ignore_eos: bool,
    out: Option<String>,
    plot: Option<String>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Option<Self>, String> {
        let mut o = Options {
            target: Target::default(),
            chat: false,
            prompt_tokens: vec![2048, 8192],
            concurrency: vec![1, 2, 4, 8],
            kinds: ["prose", "code", "structured"].map(String::from).to_vec(),
            max_tokens: 128,
            requests_per_stream: 2,
            temperature: 0.0,
            ignore_eos: false,
            out: None,
            plot: None,
        };
        let asked = each(args, &["--ignore-eos"], |flag, v| {
            match flag {
                "--ignore-eos" => o.ignore_eos = true,
                _ if o.target.take(flag, v)? => {}
                "--endpoint" if v == "chat" || v == "completions" => o.chat = v == "chat",
                "--prompt-tokens" => o.prompt_tokens = list(flag, v)?,
                "--concurrency" => o.concurrency = list(flag, v)?,
                "--kinds" => o.kinds = list(flag, v)?,
                "--max-tokens" => o.max_tokens = num(flag, v)?,
                "--requests-per-stream" => o.requests_per_stream = num(flag, v)?,
                "--temperature" => o.temperature = num(flag, v)?,
                "--out" => o.out = Some(v.into()),
                "--plot" => o.plot = Some(v.into()),
                _ => return Err(unknown(flag, v)),
            }
            Ok(())
        })?;
        if !asked {
            return Ok(None);
        }
        if o.concurrency.contains(&0) || o.prompt_tokens.contains(&0) || o.requests_per_stream == 0 || o.max_tokens == 0
        {
            return Err(
                "--concurrency, --prompt-tokens, --max-tokens and --requests-per-stream must be positive".into()
            );
        }
        Ok(Some(o))
    }
}

/// One request's prompt and what it measured.
struct Sample {
    stream: usize,
    request: usize,
    prompt_sha: String,
    prompt_counted: Option<u64>,
    start_s: f64,
    t: Timing,
}

impl Sample {
    fn prefill_tok_s(&self) -> Option<f64> {
        (self.t.ttft_s > 0.0).then(|| self.t.prompt_tokens.map(|p| p as f64 / self.t.ttft_s)).flatten()
    }

    /// Tokens after the first over the time after the first, from the usage block's count.
    fn decode(&self) -> Option<(f64, f64)> {
        let n = self.t.completion_tokens?.checked_sub(1).filter(|&n| n > 0)?;
        let dt = self.t.last_s - self.t.ttft_s;
        (dt > 0.0).then_some((n as f64, dt))
    }

    fn json(&self) -> Value {
        json!({
            "stream": self.stream, "request": self.request, "prompt_sha256_16": self.prompt_sha,
            "prompt_tokens_counted": self.prompt_counted, "start_s": self.start_s,
            "prompt_tokens": self.t.prompt_tokens, "completion_tokens": self.t.completion_tokens,
            "content_chunks": self.t.chunks, "ttft_s": self.t.ttft_s, "last_token_s": self.t.last_s,
            "e2e_s": self.t.e2e_s, "prefill_tok_s": self.prefill_tok_s(),
            "decode_tok_s": self.decode().map(|(n, dt)| n / dt), "error": self.t.error,
        })
    }
}

/// p50/p90/p99 (nearest rank), mean and count of `xs`.
pub(crate) fn stats(mut xs: Vec<f64>) -> Value {
    if xs.is_empty() {
        return json!({"n": 0});
    }
    xs.sort_by(f64::total_cmp);
    let p = |q: f64| xs[((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len()) - 1];
    json!({"n": xs.len(), "p50": p(0.5), "p90": p(0.9), "p99": p(0.99), "mean": xs.iter().sum::<f64>() / xs.len() as f64})
}

/// The stats of one cell: per-request distributions and the rates summed over its streams.
fn cell_json(kind: &str, target: u64, c: usize, wall_s: f64, samples: &[Sample]) -> Value {
    let ok: Vec<&Sample> = samples.iter().filter(|s| s.t.error.is_none()).collect();
    let of = |f: &dyn Fn(&Sample) -> Option<f64>| stats(ok.iter().filter_map(|s| f(s)).collect());
    let aggregate: f64 = (0..c)
        .filter_map(|stream| {
            let (n, dt) = ok
                .iter()
                .filter(|s| s.stream == stream)
                .filter_map(|s| s.decode())
                .fold((0.0, 0.0), |a, d| (a.0 + d.0, a.1 + d.1));
            (dt > 0.0).then(|| n / dt)
        })
        .sum();
    let out_tokens: u64 = ok.iter().filter_map(|s| s.t.completion_tokens).sum();
    json!({
        "kind": kind, "prompt_tokens_target": target, "concurrency": c, "streams": c,
        "requests": samples.len(), "errors": samples.len() - ok.len(), "wall_s": wall_s,
        "prompt_tokens": of(&|s| s.t.prompt_tokens.map(|p| p as f64)),
        "ttft_s": of(&|s| Some(s.t.ttft_s)), "prefill_tok_s": of(&|s| s.prefill_tok_s()),
        "decode_tok_s_per_stream": of(&|s| s.decode().map(|(n, dt)| n / dt)), "e2e_s": of(&|s| Some(s.t.e2e_s)),
        "aggregate_decode_tok_s": aggregate, "output_tok_s": out_tokens as f64 / wall_s.max(1e-9),
        "raw": samples.iter().map(Sample::json).collect::<Vec<_>>(),
    })
}

fn request_body(o: &Options, model: &str, prompt: &str) -> Value {
    let mut b = json!({
        "model": model, "max_tokens": o.max_tokens, "temperature": o.temperature, "stream": true,
        "stream_options": {"include_usage": true},
    });
    if o.chat {
        b["messages"] = json!([{"role": "user", "content": prompt}]);
    } else {
        b["prompt"] = json!(prompt);
    }
    if o.ignore_eos {
        b["ignore_eos"] = json!(true);
    }
    b
}

/// Runs one cell: `c` threads, each sending its own prompts one after another.
fn run_cell(
    o: &Options,
    client: &Client,
    model: &str,
    prompts: Vec<Vec<(String, Option<u64>)>>,
    label: &str,
) -> (f64, Vec<Sample>) {
    let path = if o.chat { "/v1/chat/completions" } else { "/v1/completions" };
    let total = prompts.len() * o.requests_per_stream;
    let done = Mutex::new((0usize, 0usize));
    let t0 = Instant::now();
    let samples: Vec<Sample> = std::thread::scope(|scope| {
        let handles: Vec<_> = prompts
            .into_iter()
            .enumerate()
            .map(|(stream, ps)| {
                let (done, client) = (&done, client.clone());
                scope.spawn(move || {
                    ps.into_iter()
                        .enumerate()
                        .map(|(request, (prompt, counted))| {
                            let start_s = t0.elapsed().as_secs_f64();
                            let t = client.stream(path, &request_body(o, model, &prompt));
                            let mut d = done.lock();
                            *d = (d.0 + 1, d.1 + usize::from(t.error.is_some()));
                            progress(&format!(
                                "{label}: {}/{total} requests, {} errors, {:.1} s",
                                d.0,
                                d.1,
                                t0.elapsed().as_secs_f64()
                            ));
                            let prompt_sha =
                                Sha256::digest(prompt.as_bytes())[..8].iter().map(|b| format!("{b:02x}")).collect();
                            Sample { stream, request, prompt_sha, prompt_counted: counted, start_s, t }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    eprintln!();
    (t0.elapsed().as_secs_f64(), samples)
}

/// `v` with `digits` decimals, or `-` when it is missing.
fn fmt(v: &Value, digits: usize) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.digits$}"))
}

fn print_table(cells: &[Value]) {
    println!(
        "| kind | prompt tok | c | ok/n | TTFT p50 / p90 (s) | prefill tok/s p50 | decode tok/s/stream p50 | aggregate decode tok/s | e2e p50 (s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for c in cells {
        let n = c["requests"].as_u64().unwrap_or(0);
        println!(
            "| {} | {} | {} | {}/{n} | {} / {} | {} | {} | {} | {} |",
            c["kind"].as_str().unwrap_or(""),
            fmt(&c["prompt_tokens"]["p50"], 0),
            c["concurrency"],
            n - c["errors"].as_u64().unwrap_or(0),
            fmt(&c["ttft_s"]["p50"], 3),
            fmt(&c["ttft_s"]["p90"], 3),
            fmt(&c["prefill_tok_s"]["p50"], 1),
            fmt(&c["decode_tok_s_per_stream"]["p50"], 1),
            fmt(&c["aggregate_decode_tok_s"], 1),
            fmt(&c["e2e_s"]["p50"], 3),
        );
    }
}

fn bench(o: &Options, args: &[String]) -> Result<bool, String> {
    let client = o.target.client(None);
    let served = client.model_id()?;
    let model = o.target.model.clone().unwrap_or_else(|| served.clone());
    let sizing = Sizing::of(&client, &model);
    eprintln!("bench openai: {} serving `{served}`; prompts sized by {}", o.target.url, sizing.describe());
    let root = crate::workspace_root();
    let mut corpora: Vec<Corpus> = o.kinds.iter().map(|k| corpus(&root, k)).collect::<Result<_, _>>()?;
    let n_cells = corpora.len() * o.prompt_tokens.len() * o.concurrency.len();
    let mut cells = Vec::new();
    for corpus in &mut corpora {
        for &target in &o.prompt_tokens {
            for &c in &o.concurrency {
                let kind = corpus.kind.clone();
                let label = format!("[cell {}/{n_cells}] {kind} {target} tok c{c}", cells.len() + 1);
                progress(&format!("{label}: sizing prompts"));
                let prompts: Vec<Vec<_>> = (0..c)
                    .map(|s| {
                        (0..o.requests_per_stream)
                            .map(|r| {
                                let tag = format!("Benchmark {kind} {target} c{c} stream {s} request {r}");
                                let seed = ((target * 1009 + c as u64) * 1013 + s as u64) * 1019 + r as u64;
                                corpus.prompt(&client, &model, sizing, target, &tag, seed)
                            })
                            .collect()
                    })
                    .collect();
                let (wall, samples) = run_cell(o, &client, &model, prompts, &label);
                cells.push(cell_json(&kind, target, c, wall, &samples));
            }
        }
    }
    let errors: u64 = cells.iter().filter_map(|c| c["errors"].as_u64()).sum();
    let receipt = json!({
        "tool": "cargo xtask bench openai", "command": format!("cargo xtask bench openai {}", args.join(" ")),
        "url": o.target.url, "model": served, "model_requested": model,
        "endpoint": if o.chat { "/v1/chat/completions" } else { "/v1/completions" },
        "unix_time": SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "prompt_sizing": sizing.describe(), "max_tokens": o.max_tokens, "temperature": o.temperature,
        "ignore_eos": o.ignore_eos, "requests_per_stream": o.requests_per_stream, "errors": errors, "cells": cells,
    });
    print_table(&cells);
    write_receipt(o.out.as_deref(), &receipt)?;
    if let Some(png) = &o.plot {
        crate::bench_plot::plot(&receipt, std::path::Path::new(png))?;
        eprintln!("plot: {png}");
    }
    Ok(errors == 0)
}

/// One progress line: redrawn in place on a terminal, a line of its own in a log.
pub(crate) fn progress(line: &str) {
    if std::io::stderr().is_terminal() {
        eprint!("\r{line}   ");
    } else {
        eprintln!("{line}");
    }
}

/// `cargo xtask bench openai`: 0 when every request succeeded, 1 when some failed or the run broke, 2 for a bad command line.
pub fn run(args: &[String]) -> std::process::ExitCode {
    let o = match Options::parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench openai: {e}\n{USAGE}");
            return std::process::ExitCode::from(crate::USAGE_ERROR);
        }
    };
    match bench(&o, args) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("bench openai: some requests failed; see `errors` in the table and the receipt");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("bench openai: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
