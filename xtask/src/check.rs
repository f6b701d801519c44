//! `cargo xtask check sweep|invariance|divergence|needle|nll`: what a user checks before trusting a server, against any OpenAI server.

use crate::bench_openai::progress;
use crate::bench_openai_http::Client;
use crate::bench_openai_prompts::{Corpus, Sizing, corpus};
use crate::flags::{Target, each, num, unknown, write_receipt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

const USAGE: &str = "\
usage: cargo xtask check sweep|invariance|divergence|needle|nll [--url URL] [--model NAME] [--api-key KEY] [--timeout-s S]
         [--concurrency N] [--out FILE]
  sweep       [--lengths N] [--max-len L]: a prompt of every length in a spread of N (default 2,124) from 1 to L - 1
              (L: the context, default the server's max_model_len), one reply token each; every failure is listed
  invariance  [--prompts K] [--prompt-tokens T] [--max-tokens M]: K requests solo and all at once, greedy and
              seeded, and again with \"draft\": false, must match bit for bit (text, ids, logprobs); a prompt
              resumed from the prompt cache must match it fresh
  divergence  --reference URL [--max-tokens M]: 12 prompts greedy on both servers; the first token where they part
  needle      [--lengths N] [--max-len L] [--min-rate R]: a passphrase at depths 0, 25, 50, 75, 100 % of N (4) prose
              prompts up to the context; passes when the greedy reply names it in at least R (default 1) of them
  nll         --reference URL [--prompts K] [--max-tokens M] [--max-nll-increase D] [--max-top1-drop P]: the reference's
              greedy continuations scored here with forced_tokens; NLL and top-1 per prompt-length bucket (bars: 0.01, 0.01)
  defaults: --url http://127.0.0.1:8000, the first model of /v1/models, concurrency 4, timeout 600 s";

pub struct Options {
    pub target: Target,
    pub concurrency: usize,
    pub out: Option<String>,
    pub lengths: Option<usize>,
    pub max_len: Option<u64>,
    pub prompts: usize,
    pub prompt_tokens: u64,
    pub max_tokens: u64,
    pub reference: Option<String>,
    pub min_rate: f64,
    pub max_nll_increase: f64,
    pub max_top1_drop: f64,
}

impl Options {
    fn parse(args: &[String]) -> Result<Option<Self>, String> {
        let mut o = Options {
            target: Target::default(),
            concurrency: 4,
            out: None,
            lengths: None,
            max_len: None,
            prompts: 8,
            prompt_tokens: 128,
            max_tokens: 32,
            reference: None,
            min_rate: 1.0,
            max_nll_increase: 0.01,
            max_top1_drop: 0.01,
        };
        let asked = each(args, &[], |flag, v| {
            match flag {
                _ if o.target.take(flag, v)? => {}
                "--concurrency" => o.concurrency = num(flag, v)?,
                "--out" => o.out = Some(v.into()),
                "--lengths" => o.lengths = Some(num(flag, v)?),
                "--max-len" => o.max_len = Some(num(flag, v)?),
                "--prompts" => o.prompts = num(flag, v)?,
                "--prompt-tokens" => o.prompt_tokens = num(flag, v)?,
                "--max-tokens" => o.max_tokens = num(flag, v)?,
                "--reference" => o.reference = Some(v.into()),
                "--min-rate" => o.min_rate = num(flag, v)?,
                "--max-nll-increase" => o.max_nll_increase = num(flag, v)?,
                "--max-top1-drop" => o.max_top1_drop = num(flag, v)?,
                _ => return Err(unknown(flag, v)),
            }
            Ok(())
        })?;
        if !asked {
            return Ok(None);
        }
        if o.concurrency == 0 || o.lengths == Some(0) || o.prompts == 0 || o.prompt_tokens == 0 || o.max_tokens == 0 {
            return Err("--concurrency, --lengths, --prompts, --prompt-tokens and --max-tokens must be positive".into());
        }
        Ok(Some(o))
    }
}

/// `n` lengths from 1 to `limit`: the first half consecutive (short prompts break most often), the rest evenly spread, `limit` last.
pub fn spread(n: usize, limit: u64) -> Vec<u64> {
    if n as u64 >= limit {
        return (1..=limit).collect();
    }
    if n == 1 {
        return vec![limit];
    }
    let head = (n / 2).max(1) as u64;
    let rest = (n as u64 - head).max(1);
    let mut v: Vec<u64> = (1..=head).collect();
    v.extend((1..=rest).map(|i| head + (limit - head) * i / rest));
    v.dedup();
    v
}

/// Runs `jobs` on `c` threads, each job's result in its place; `label` shows progress.
pub(crate) fn parallel<T: Send, R: Send>(c: usize, jobs: Vec<T>, label: &str, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let total = jobs.len();
    let queue = Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>().into_iter());
    let out = Mutex::new((0..total).map(|_| None).collect::<Vec<Option<R>>>());
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..c.min(total).max(1) {
            s.spawn(|| {
                loop {
                    // Taken in its own statement, so the queue is not locked while the job runs.
                    let next = queue.lock().next();
                    let Some((i, job)) = next else { break };
                    let r = f(job);
                    let mut o = out.lock();
                    o[i] = Some(r);
                    let done = o.iter().filter(|r| r.is_some()).count();
                    progress(&format!("{label}: {done}/{total}, {:.1} s", t0.elapsed().as_secs_f64()));
                }
            });
        }
    });
    eprintln!();
    out.into_inner().into_iter().map(|r| r.expect("every job ran")).collect()
}

/// `sweep`: one request per length, the prompt the first `len` ids of repository text; a failure is any non-200 or wrong usage.
fn sweep(o: &Options, client: &Client, model: &str) -> Result<Value, String> {
    let limit = match o.max_len.or_else(|| client.max_model_len()) {
        Some(l) => l,
        None => return Err("the server gives no max_model_len in /v1/models: pass --max-len".into()),
    };
    let mut code = corpus(&crate::workspace_root(), "code")?;
    let mut ids = Vec::new();
    // The estimate of characters per token may be short of the mark: ask for twice as much until the ids cover `limit`.
    for round in 0..6 {
        let text = code.prompt(client, model, Sizing::Estimate, (2 * limit + 64) << round, "Length sweep", 1).0;
        ids = client.tokenize(model, &text).ok_or("the server has no /tokenize to build id prompts from")?;
        if ids.len() as u64 >= 2 * limit {
            break;
        }
    }
    if (ids.len() as u64) < 2 * limit {
        return Err(format!("only {} ids of text for a {limit}-token sweep", ids.len()));
    }
    // The longest prompt leaves room for its one reply token inside the context.
    let lengths = spread(o.lengths.unwrap_or(2124), limit.saturating_sub(1).max(1));
    let t0 = Instant::now();
    let jobs: Vec<(usize, u64)> = lengths.iter().copied().enumerate().collect();
    let results = parallel(o.concurrency, jobs, "sweep", |(i, len)| {
        // The i-th length starts at id i: distinct first tokens, so no prompt shares a cached prefix with another.
        let prompt = &ids[i..i + len as usize];
        let body = json!({"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 1});
        let r = client.post_json("/v1/completions", &body);
        let why = match &r {
            Err(e) => Some(e.clone()),
            Ok((200, v)) if v["usage"]["prompt_tokens"].as_u64() != Some(len) => {
                Some(format!("usage.prompt_tokens {} for a {len}-token prompt", v["usage"]["prompt_tokens"]))
            }
            Ok((200, v)) if !v["choices"][0]["logprobs"]["token_logprobs"][0].as_f64().is_some_and(f64::is_finite) => {
                Some(format!("no finite logprob for the reply token: {}", v["choices"][0]))
            }
            Ok((200, _)) => None,
            Ok((status, v)) => Some(format!("HTTP {status}: {}", v.to_string().chars().take(300).collect::<String>())),
        };
        why.map(|w| json!({"length": len, "error": w}))
    });
    let failures: Vec<Value> = results.into_iter().flatten().collect();
    let prompt_tokens: u64 = lengths.iter().sum();
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "sweep: {} lengths from 1 to {} (context {limit}), {} failed, {:.1} s ({:.0} prompt tok/s)",
        lengths.len(),
        lengths.last().unwrap_or(&0),
        failures.len(),
        secs,
        prompt_tokens as f64 / secs
    );
    for f in failures.iter().take(20) {
        println!("  length {}: {}", f["length"], f["error"]);
    }
    Ok(
        json!({"check": "sweep", "max_len": limit, "lengths": lengths.len(), "first": lengths.first(), "last": lengths.last(),
        "prompt_tokens": prompt_tokens, "seconds": secs, "failures": failures, "pass": failures.is_empty()}),
    )
}

/// Each pair of replies that differs or failed, as a failure named `check` with its sides under `names`.
fn compare(a: &[Result<Value, String>], b: &[Result<Value, String>], [check, x, y]: [&str; 3], out: &mut Vec<Value>) {
    for (i, (a, b)) in a.iter().zip(b).enumerate() {
        let what = format!("prompt {} {}", i / 2, if i % 2 == 0 { "greedy" } else { "seeded" });
        match (a, b) {
            (Ok(a), Ok(b)) if a == b => {}
            (Ok(a), Ok(b)) => out.push(json!({"check": check, "request": what, x: a, y: b})),
            (Err(e), _) | (_, Err(e)) => out.push(json!({"check": check, "request": what, "error": e})),
        }
    }
}

/// `b` with `key` set to `v`.
fn with(b: &Value, key: &str, v: Value) -> Value {
    let mut b = b.clone();
    b[key] = v;
    b
}

/// The parts of a completion choice that must not change with what else runs: text, ids, logprobs, finish.
fn choice(v: &Value) -> Value {
    let c = &v["choices"][0];
    json!({"text": c["text"], "logprobs": c["logprobs"], "finish_reason": c["finish_reason"], "token_ids": c["token_ids"]})
}

/// `invariance`: solo == concurrent (greedy and seeded) and resumed == fresh, compared as JSON values (f32 logprobs print exactly).
fn invariance(o: &Options, client: &Client, model: &str) -> Result<Value, String> {
    let mut texts = Vec::new();
    for (k, kind) in ["code", "prose"].iter().enumerate() {
        let mut c: Corpus = corpus(&crate::workspace_root(), kind)?;
        for i in (0..o.prompts).filter(|i| i % 2 == k) {
            texts.push(
                c.prompt(client, model, Sizing::Estimate, o.prompt_tokens, &format!("Check {i}"), 7 + i as u64).0,
            );
        }
    }
    let body = |text: &str, seed: Option<u64>| {
        let mut b =
            json!({"model": model, "prompt": text, "max_tokens": o.max_tokens, "logprobs": 5, "temperature": 0});
        if let Some(s) = seed {
            b["temperature"] = json!(0.8);
            b["seed"] = json!(s);
        }
        b
    };
    let jobs: Vec<Value> =
        texts.iter().enumerate().flat_map(|(i, t)| [body(t, None), body(t, Some(1000 + i as u64))]).collect();
    let send = |b: Value| match client.post_json("/v1/completions", &b) {
        Ok((200, v)) => Ok(choice(&v)),
        Ok((s, v)) => Err(format!("HTTP {s}: {v}")),
        Err(e) => Err(e),
    };
    let solo = parallel(1, jobs.clone(), "invariance: solo", send);
    let plain: Vec<Value> = jobs.iter().map(|b| with(b, "draft", json!(false))).collect();
    let undrafted = parallel(1, plain, "invariance: \"draft\": false", send);
    let together = parallel(jobs.len(), jobs, "invariance: all at once", send);
    let mut failures = Vec::new();
    compare(&solo, &together, ["concurrent == solo", "solo", "concurrent"], &mut failures);
    compare(&solo, &undrafted, ["drafted == plain", "drafted", "plain"], &mut failures);
    // A prefix no earlier request saw, so the first run is fresh and the third resumes what the second left cached.
    let nonce = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let prefix = format!("Resume check {nonce}.\n{}", texts[0].repeat(2));
    let (a, b) = (format!("{prefix}\nFirst tail."), format!("{prefix}\nA second, different tail."));
    let full = |t: &str| client.post_json("/v1/completions", &body(t, None));
    let (fresh, _, resumed) = (full(&a)?, full(&b)?, full(&a)?);
    let cached = resumed.1["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    if fresh.0 != 200 || resumed.0 != 200 || choice(&fresh.1) != choice(&resumed.1) {
        failures.push(json!({"check": "resumed == fresh", "fresh": fresh.1, "resumed": resumed.1}));
    }
    println!(
        "invariance: {} requests solo vs at once and vs \"draft\": false, greedy and seeded; resumed vs fresh (cached tokens {}); {} failed",
        solo.len(),
        cached.map_or("not reported".into(), |c| c.to_string()),
        failures.len()
    );
    for f in &failures {
        println!("  {}", f.to_string().chars().take(400).collect::<String>());
    }
    Ok(
        json!({"check": "invariance", "requests": solo.len(), "max_tokens": o.max_tokens, "resumed_cached_tokens": cached,
        "drafted_vs_plain": true, "failures": failures,
        "pass": failures.is_empty()}),
    )
}

/// `divergence`: 12 prompts, greedy on this server and the reference; per prompt the first reply token where they differ.
fn divergence(o: &Options, client: &Client, model: &str) -> Result<Value, String> {
    let url = o.reference.as_deref().ok_or("divergence needs --reference URL")?;
    let reference = o.target.client(Some(url));
    let ref_model = reference.model_id()?;
    let mut prompts = Vec::new();
    for kind in ["code", "prose", "structured"] {
        let mut c = corpus(&crate::workspace_root(), kind)?;
        prompts.extend(
            (0..4)
                .map(|i| (kind, c.prompt(client, model, Sizing::Estimate, 256, &format!("Divergence {i}"), 31 + i).0)),
        );
    }
    let tokens = |c: &Client, m: &str, p: &str| -> Result<Vec<String>, String> {
        let b = json!({"model": m, "prompt": p, "max_tokens": o.max_tokens, "temperature": 0, "logprobs": 1});
        match c.post_json("/v1/completions", &b)? {
            (200, v) => Ok(v["choices"][0]["logprobs"]["tokens"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| t.to_string())
                .collect()),
            (s, v) => Err(format!("HTTP {s}: {v}")),
        }
    };
    let rows: Vec<Value> = parallel(o.concurrency, prompts, "divergence", |(kind, p)| {
        match (tokens(client, model, &p), tokens(&reference, &ref_model, &p)) {
            (Ok(a), Ok(b)) => {
                let first =
                    a.iter().zip(&b).position(|(x, y)| x != y).or((a.len() != b.len()).then(|| a.len().min(b.len())));
                json!({"kind": kind, "tokens": [a.len(), b.len()], "first_divergence": first})
            }
            (Err(e), _) | (_, Err(e)) => json!({"kind": kind, "error": e}),
        }
    });
    let errors = rows.iter().filter(|r| r["error"].is_string()).count();
    let same = rows.iter().filter(|r| r["first_divergence"].is_null() && r["error"].is_null()).count();
    println!(
        "divergence against {url}: {same} of {} prompts identical for {} tokens, {errors} errors",
        rows.len(),
        o.max_tokens
    );
    for r in &rows {
        println!("  {r}");
    }
    Ok(json!({"check": "divergence", "reference": url, "reference_model": ref_model, "max_tokens": o.max_tokens,
        "identical": same, "prompts": rows, "pass": errors == 0}))
}

/// `cargo xtask check`: 0 when the check passed, 1 when it failed or could not run, 2 for a bad command line.
pub fn run(args: &[String]) -> ExitCode {
    let which = args.first().map(String::as_str).unwrap_or("");
    if matches!(which, "-h" | "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let o = match Options::parse(args.get(1..).unwrap_or(&[])) {
        Ok(Some(o)) if ["sweep", "invariance", "divergence", "needle", "nll"].contains(&which) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Some(_)) => {
            return crate::usage_error(&format!(
                "check needs sweep, invariance, divergence, needle or nll, not `{which}`"
            ));
        }
        Err(e) => {
            eprintln!("check: {e}\n{USAGE}");
            return ExitCode::from(crate::USAGE_ERROR);
        }
    };
    let client = o.target.client(None);
    let result = client.model_id().and_then(|served| {
        let model = o.target.model.clone().unwrap_or(served);
        let mut r = match which {
            "sweep" => sweep(&o, &client, &model),
            "invariance" => invariance(&o, &client, &model),
            "needle" => crate::check_quality::needle(&o, &client, &model),
            "nll" => crate::check_quality::nll(&o, &client, &model),
            _ => divergence(&o, &client, &model),
        }?;
        r["url"] = json!(o.target.url);
        r["model"] = json!(model);
        r["command"] = json!(format!("cargo xtask check {}", args.join(" ")));
        Ok(r)
    });
    let r = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("check {which}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = write_receipt(o.out.as_deref(), &r) {
        eprintln!("check {which}: {e}");
        return ExitCode::FAILURE;
    }
    if r["pass"] == true { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn spread_covers_one_to_the_limit_without_repeats() {
        assert_eq!(spread(1, 100), [100]);
        assert_eq!(spread(4, 261), [1, 2, 131, 261]);
        assert_eq!(spread(10, 5), [1, 2, 3, 4, 5]);
        let s = spread(2124, 8191);
        assert_eq!((s.len(), s[0], s[1061], *s.last().unwrap()), (2124, 1, 1062, 8191));
        assert!(s.windows(2).all(|w| w[0] < w[1]));
    }
}
