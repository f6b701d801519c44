//! `cargo xtask check needle|nll`: a fact found at every depth, and NLL / top-1 on a reference server's own continuations.

use crate::bench_openai_http::Client;
use crate::bench_openai_prompts::{Sizing, corpus};
use crate::check::{Options, parallel};
use serde_json::{Value, json};

/// The needle's answer for one cell: a number no filler text contains.
fn secret(len: u64, depth: u64) -> String {
    format!("{}", 40_000 + (len * 37 + depth * 101) % 9_973)
}

/// `needle`: a sentence with a number at depths 0–100 % of prose prompts up to the context; found when the greedy reply says it.
pub fn needle(o: &Options, client: &Client, model: &str) -> Result<Value, String> {
    let limit = o.max_len.or_else(|| client.max_model_len()).ok_or("no max_model_len in /v1/models: pass --max-len")?;
    let depths = [0u64, 25, 50, 75, 100];
    // The question and the reply need room after the filler.
    let longest = limit.saturating_sub(96).max(32);
    let n = o.lengths.unwrap_or(4) as u64;
    let lengths: Vec<u64> = (1..=n).map(|i| longest * i / n).filter(|&l| l >= 32).collect();
    let mut prose = corpus(&crate::workspace_root(), "prose")?;
    let sizing = Sizing::of(client, model);
    let mut cells = Vec::new();
    for &len in &lengths {
        let filler = prose.prompt(client, model, sizing, len, "Notes", len).0;
        for &depth in &depths {
            let code = secret(len, depth);
            let fact = format!(" The secret passphrase is {code}. Remember it. ");
            let chars: Vec<char> = filler.chars().collect();
            let at = chars.len() * depth as usize / 100;
            let (a, b): (String, String) = (chars[..at].iter().collect(), chars[at..].iter().collect());
            let prompt =
                format!("{a}{fact}{b}\n\nQuestion: what is the secret passphrase?\nAnswer: The secret passphrase is");
            cells.push((len, depth, code, prompt));
        }
    }
    let rows: Vec<Value> = parallel(o.concurrency, cells, "needle", |(len, depth, code, prompt)| {
        let body = json!({"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0});
        match client.post_json("/v1/completions", &body) {
            Ok((200, v)) => {
                let reply = v["choices"][0]["text"].as_str().unwrap_or("").to_string();
                json!({"length": len, "prompt_tokens": v["usage"]["prompt_tokens"], "depth_pct": depth,
                    "found": reply.contains(&code), "reply": reply})
            }
            Ok((s, v)) => json!({"length": len, "depth_pct": depth, "error": format!("HTTP {s}: {v}")}),
            Err(e) => json!({"length": len, "depth_pct": depth, "error": e}),
        }
    });
    let found = rows.iter().filter(|r| r["found"] == true).count();
    let errors = rows.iter().filter(|r| r["error"].is_string()).count();
    let rate = found as f64 / rows.len().max(1) as f64;
    println!(
        "needle: found {found} of {} ({:.0} %), {errors} errors; min rate {}",
        rows.len(),
        100.0 * rate,
        o.min_rate
    );
    for r in &rows {
        println!(
            "  length {:>6} depth {:>3} %: {}",
            r["length"],
            r["depth_pct"],
            if r["found"] == true { "found" } else { "missed" }
        );
    }
    Ok(json!({"check": "needle", "max_len": limit, "depths_pct": depths, "lengths": lengths, "found": found,
        "rate": rate, "min_rate": o.min_rate, "errors": errors, "cells": rows, "pass": errors == 0 && rate >= o.min_rate}))
}

/// The continuation's ids from a completions reply: ours and vLLM's (`return_token_ids`) places.
fn reply_ids(v: &Value) -> Option<Vec<u32>> {
    let c = &v["choices"][0];
    let ids = c["logprobs"]["token_ids"].as_array().or_else(|| c["token_ids"].as_array())?;
    ids.iter().map(|t| t.as_u64().map(|t| t as u32)).collect()
}

/// `nll`: the reference's greedy continuations, scored by this server teacher-forced (`forced_tokens`); NLL and top-1 per length bucket.
pub fn nll(o: &Options, client: &Client, model: &str) -> Result<Value, String> {
    let url = o.reference.as_deref().ok_or("nll needs --reference URL")?;
    let reference = o.target.client(Some(url));
    let ref_model = reference.model_id()?;
    let limit = o.max_len.or_else(|| client.max_model_len()).unwrap_or(4096);
    let buckets: Vec<u64> =
        [128u64, 1024, 4096, 16384].into_iter().filter(|&b| b + o.max_tokens + 64 < limit).collect();
    if buckets.is_empty() {
        return Err(format!("a context of {limit} leaves no room for a 128-token prompt and {} tokens", o.max_tokens));
    }
    let mut jobs = Vec::new();
    let sizing = Sizing::of(client, model);
    for kind in ["code", "prose"] {
        let mut c = corpus(&crate::workspace_root(), kind)?;
        for &b in &buckets {
            jobs.extend(
                (0..o.prompts as u64).map(|i| (b, c.prompt(client, model, sizing, b, &format!("Score {i}"), 71 + i).0)),
            );
        }
    }
    let rows: Vec<Value> = parallel(o.concurrency, jobs, "nll", |(bucket, prompt)| {
        let generate = json!({"model": ref_model, "prompt": prompt, "max_tokens": o.max_tokens, "temperature": 0, "logprobs": 1,
            "return_token_ids": true});
        let (ids, ref_lps) = match reference.post_json("/v1/completions", &generate) {
            Ok((200, v)) => match reply_ids(&v) {
                Some(ids) => (ids, v["choices"][0]["logprobs"]["token_logprobs"].clone()),
                None => return json!({"bucket": bucket, "error": "the reference returns no token ids"}),
            },
            Ok((s, v)) => return json!({"bucket": bucket, "error": format!("reference: HTTP {s}: {v}")}),
            Err(e) => return json!({"bucket": bucket, "error": format!("reference: {e}")}),
        };
        let score =
            json!({"model": model, "prompt": prompt, "forced_tokens": ids, "max_tokens": ids.len(), "logprobs": 1});
        match client.post_json("/v1/completions", &score) {
            Ok((200, v)) if reply_ids(&v).as_ref() != Some(&ids) => {
                json!({"bucket": bucket, "error": format!("scored tokens {:?} are not the forced {ids:?}", reply_ids(&v))})
            }
            Ok((200, v)) => {
                let lp = &v["choices"][0]["logprobs"];
                let ours: Vec<f64> =
                    lp["token_logprobs"].as_array().into_iter().flatten().filter_map(Value::as_f64).collect();
                let theirs: Vec<f64> = ref_lps.as_array().into_iter().flatten().filter_map(Value::as_f64).collect();
                // Our top-1 agrees where the forced token's logprob is the best of the alternatives we report.
                let top1 = lp["top_logprobs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .zip(&ours)
                    .filter(|(alts, mine)| {
                        alts.as_object()
                            .filter(|m| !m.is_empty())
                            .is_some_and(|m| m.values().all(|a| a.as_f64().is_some_and(|a| a <= **mine)))
                    })
                    .count();
                json!({"bucket": bucket, "tokens": ours.len(), "nll": -ours.iter().sum::<f64>(),
                    "reference_nll": -theirs.iter().sum::<f64>(), "top1": top1})
            }
            Ok((s, v)) => json!({"bucket": bucket, "error": format!("HTTP {s}: {v}")}),
            Err(e) => json!({"bucket": bucket, "error": e}),
        }
    });
    let errors = rows.iter().filter(|r| r["error"].is_string()).count();
    let mut by_bucket = serde_json::Map::new();
    let mut pass = errors == 0;
    for &b in &buckets {
        let rs: Vec<&Value> = rows.iter().filter(|r| r["bucket"] == b && r["error"].is_null()).collect();
        let sum = |k: &str| rs.iter().filter_map(|r| r[k].as_f64()).sum::<f64>();
        let n = sum("tokens").max(1.0);
        let (ours, theirs, top1) = (sum("nll") / n, sum("reference_nll") / n, sum("top1") / n);
        let ok = ours - theirs <= o.max_nll_increase && top1 >= 1.0 - o.max_top1_drop;
        pass &= ok;
        println!(
            "nll: prompts of {b:>5} tokens: {n} scored, NLL {ours:.4} vs reference {theirs:.4} (+{:.4}), top-1 {:.4}: {}",
            ours - theirs,
            top1,
            if ok { "ok" } else { "FAIL" }
        );
        by_bucket.insert(
            b.to_string(),
            json!({"tokens": n, "nll": ours, "reference_nll": theirs, "top1": top1, "pass": ok}),
        );
    }
    Ok(json!({"check": "nll", "reference": url, "reference_model": ref_model, "max_tokens": o.max_tokens,
        "thresholds": {"max_nll_increase": o.max_nll_increase, "max_top1_drop": o.max_top1_drop},
        "by_bucket": by_bucket, "errors": errors, "rows": rows, "pass": pass}))
}
