//! `cargo xtask bench replay`: a recorded multi-turn session (one chat request body per line) replayed at several concurrencies.

use crate::bench_openai::stats;
use crate::flags::{Target, each, list, num, unknown, write_receipt};
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

const USAGE: &str = "\
usage: cargo xtask bench replay [--session FILE] [--url URL] [--model NAME] [--api-key KEY] [--concurrency 1,2,4]
         [--max-tokens N] [--timeout-s S] [--out FILE]
  FILE: JSON lines, each a /v1/chat/completions body as the client sent it (growing history, tool turns);
  default assets/bench/agent-session.jsonl. Each of c copies runs the turns in order, its own tag in front of the
  first message so copies share no prefix; reported per c: wall time, TTFT, e2e, and the prompt-cache hit rate
  (usage.prompt_tokens_details.cached_tokens over prompt_tokens). --max-tokens caps every turn's reply (default 64)";

struct Options {
    session: String,
    target: Target,
    concurrency: Vec<usize>,
    max_tokens: u64,
    out: Option<String>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Option<Self>, String> {
        let mut o = Options {
            session: crate::workspace_root().join("assets/bench/agent-session.jsonl").display().to_string(),
            target: Target::default(),
            concurrency: vec![1, 2, 4],
            max_tokens: 64,
            out: None,
        };
        let asked = each(args, &[], |flag, v| {
            match flag {
                "--session" => o.session = v.into(),
                _ if o.target.take(flag, v)? => {}
                "--concurrency" => o.concurrency = list(flag, v)?,
                "--max-tokens" => o.max_tokens = num(flag, v)?,
                "--out" => o.out = Some(v.into()),
                _ => return Err(unknown(flag, v)),
            }
            Ok(())
        })?;
        if !asked {
            return Ok(None);
        }
        if o.concurrency.is_empty() || o.concurrency.contains(&0) || o.max_tokens == 0 {
            return Err("--concurrency and --max-tokens must be positive".into());
        }
        Ok(Some(o))
    }
}

/// The session's turns: every non-empty line a JSON object with `messages`; a bad line is named.
fn read_session(path: &str) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let turns: Vec<Value> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let v: Value = serde_json::from_str(l).map_err(|e| format!("{path}:{}: {e}", i + 1))?;
            v["messages"].is_array().then_some(v).ok_or_else(|| format!("{path}:{}: no `messages` list", i + 1))
        })
        .collect::<Result<_, _>>()?;
    if turns.is_empty() {
        return Err(format!("{path}: no turns"));
    }
    Ok(turns)
}

/// One turn as copy `copy` sends it: its tag before the first message, streamed with usage, the reply capped.
fn turn_body(turn: &Value, copy: usize, run: u128, model: &str, max_tokens: u64) -> Value {
    let mut b = turn.clone();
    let first = &mut b["messages"][0]["content"];
    if let Some(text) = first.as_str() {
        *first = json!(format!("[session {run}-{copy}] {text}"));
    }
    b["model"] = json!(model);
    b["stream"] = json!(true);
    b["stream_options"] = json!({"include_usage": true});
    let asked = b["max_tokens"].as_u64().unwrap_or(max_tokens);
    b["max_tokens"] = json!(asked.min(max_tokens));
    b
}

fn replay(o: &Options, args: &[String]) -> Result<bool, String> {
    let turns = read_session(&o.session)?;
    let client = o.target.client(None);
    let served = client.model_id()?;
    let model = o.target.model.clone().unwrap_or_else(|| served.clone());
    let run = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    eprintln!("bench replay: {} turns of {} against {} (`{served}`)", turns.len(), o.session, o.target.url);
    let mut cells = Vec::new();
    for (ci, &c) in o.concurrency.iter().enumerate() {
        let t0 = Instant::now();
        let rows: Vec<Vec<Value>> = std::thread::scope(|s| {
            let copies: Vec<_> = (0..c)
                .map(|copy| {
                    let (client, turns, model) = (client.clone(), &turns, model.as_str());
                    s.spawn(move || {
                        turns
                            .iter()
                            .enumerate()
                            .map(|(i, turn)| {
                                let body = turn_body(turn, ci * 1000 + copy, run, model, o.max_tokens);
                                let t = client.stream("/v1/chat/completions", &body);
                                json!({"copy": copy, "turn": i, "ttft_s": t.ttft_s, "e2e_s": t.e2e_s,
                                    "prompt_tokens": t.prompt_tokens, "cached_tokens": t.cached_tokens,
                                    "completion_tokens": t.completion_tokens, "error": t.error})
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            copies.into_iter().map(|h| h.join().unwrap_or_default()).collect()
        });
        let wall = t0.elapsed().as_secs_f64();
        let all: Vec<&Value> = rows.iter().flatten().collect();
        let ok: Vec<&&Value> = all.iter().filter(|r| r["error"].is_null()).collect();
        let sum = |k: &str| ok.iter().filter_map(|r| r[k].as_u64()).sum::<u64>();
        let (prompt, cached) = (sum("prompt_tokens"), sum("cached_tokens"));
        let reported = ok.iter().any(|r| r["cached_tokens"].is_u64());
        let cell = json!({"concurrency": c, "requests": all.len(), "errors": all.len() - ok.len(), "wall_s": wall,
            "ttft_s": stats(ok.iter().map(|r| r["ttft_s"].as_f64().unwrap_or(0.0)).collect()),
            "e2e_s": stats(ok.iter().map(|r| r["e2e_s"].as_f64().unwrap_or(0.0)).collect()),
            "prompt_tokens": prompt, "cached_tokens": if reported { json!(cached) } else { Value::Null },
            "cache_hit_rate": if reported { json!(cached as f64 / prompt.max(1) as f64) } else { Value::Null },
            "raw": all});
        println!(
            "c{c}: {} requests, {} errors, wall {wall:.2} s, TTFT p50 {} s, cache hit rate {}",
            cell["requests"], cell["errors"], cell["ttft_s"]["p50"], cell["cache_hit_rate"]
        );
        cells.push(cell);
    }
    let errors: u64 = cells.iter().filter_map(|c| c["errors"].as_u64()).sum();
    let receipt = json!({"tool": "cargo xtask bench replay", "command": format!("cargo xtask bench replay {}", args.join(" ")),
        "session": o.session, "turns": turns.len(), "url": o.target.url, "model": served, "max_tokens": o.max_tokens,
        "errors": errors, "cells": cells});
    write_receipt(o.out.as_deref(), &receipt)?;
    Ok(errors == 0)
}

/// `cargo xtask bench replay`: 0 when every turn succeeded, 1 otherwise, 2 for a bad command line.
pub fn run(args: &[String]) -> ExitCode {
    match Options::parse(args) {
        Ok(None) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench replay: {e}\n{USAGE}");
            ExitCode::from(crate::USAGE_ERROR)
        }
        Ok(Some(o)) => match replay(&o, args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => {
                eprintln!("bench replay: some turns failed; see `errors` in the receipt");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("bench replay: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
