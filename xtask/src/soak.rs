//! `cargo xtask soak`: a bounded-time mix of realistic requests against any OpenAI server; errors, lost requests, memory over time.

use crate::bench_openai::{progress, stats};
use crate::bench_openai_http::Client;
use crate::bench_openai_prompts::{Corpus, Sizing, corpus};
use crate::flags::{Target, each, num, unknown, write_receipt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};
use tf_core::rng::SplitMix64;

const USAGE: &str = "\
usage: cargo xtask soak [--url URL] [--model NAME] [--api-key KEY] [--duration-s S] [--concurrency N]
         [--seed N] [--max-tokens N] [--long-tokens N] [--sample-s S] [--pid PID] [--max-rss-growth F]
         [--timeout-s S] [--out FILE]
  defaults: --url http://127.0.0.1:8000, the first model of /v1/models, 600 s, concurrency 4, seed 0,
  up to 64 tokens a reply, long prompts of 1024 tokens, /health and memory sampled every 5 s, memory
  from the server's /metrics (process_resident_memory_bytes) or else /proc/PID, flat within 0.10";

struct Options {
    target: Target,
    duration_s: f64,
    concurrency: usize,
    seed: u64,
    max_tokens: u64,
    long_tokens: u64,
    sample_s: f64,
    pid: Option<u32>,
    max_rss_growth: f64,
    out: Option<String>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Option<Self>, String> {
        let mut o = Options {
            target: Target::default(),
            duration_s: 600.0,
            concurrency: 4,
            seed: 0,
            max_tokens: 64,
            long_tokens: 1024,
            sample_s: 5.0,
            pid: None,
            max_rss_growth: 0.10,
            out: None,
        };
        let asked = each(args, &[], |flag, v| {
            match flag {
                _ if o.target.take(flag, v)? => {}
                "--duration-s" => o.duration_s = num(flag, v)?,
                "--concurrency" => o.concurrency = num(flag, v)?,
                "--seed" => o.seed = num(flag, v)?,
                "--max-tokens" => o.max_tokens = num(flag, v)?,
                "--long-tokens" => o.long_tokens = num(flag, v)?,
                "--sample-s" => o.sample_s = num(flag, v)?,
                "--pid" => o.pid = Some(num(flag, v)?),
                "--max-rss-growth" => o.max_rss_growth = num(flag, v)?,
                "--out" => o.out = Some(v.into()),
                _ => return Err(unknown(flag, v)),
            }
            Ok(())
        })?;
        if !asked {
            return Ok(None);
        }
        if o.concurrency == 0 || o.max_tokens == 0 || o.long_tokens == 0 || o.duration_s <= 0.0 || o.sample_s <= 0.0 {
            return Err(
                "--concurrency, --max-tokens, --long-tokens, --duration-s and --sample-s must be positive".into()
            );
        }
        Ok(Some(o))
    }
}

/// What a request does; the mix draws them by weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Chat,
    Stream,
    Long,
    Cancel,
    Tool,
    Bad,
}

const MIX: [(Kind, u64); 6] =
    [(Kind::Chat, 25), (Kind::Stream, 25), (Kind::Long, 15), (Kind::Cancel, 15), (Kind::Tool, 10), (Kind::Bad, 10)];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Chat => "chat",
            Kind::Stream => "chat_stream",
            Kind::Long => "long_completion_stream",
            Kind::Cancel => "cancelled_stream",
            Kind::Tool => "tool_chat",
            Kind::Bad => "malformed",
        }
    }

    fn draw(rng: &mut SplitMix64) -> Kind {
        let total: u64 = MIX.iter().map(|m| m.1).sum();
        let mut r = rng.next_u64() % total;
        for (k, w) in MIX {
            if r < w {
                return k;
            }
            r -= w;
        }
        unreachable!("the weights sum to total")
    }
}

/// How one request ended. `Refused` is the server saying it is full (429, 503); `Lost` is a reply that never came whole.
#[derive(Clone, Debug)]
enum Outcome {
    Ok,
    Refused,
    Cancelled,
    Error(String),
    Lost(String),
}

/// An error string from the client: overload, a wrong reply, or a transport failure (the request went missing).
fn classify(err: String) -> Outcome {
    if err.starts_with("HTTP 429") || err.starts_with("HTTP 503") {
        Outcome::Refused
    } else if err.starts_with("HTTP ") || err.starts_with("bad SSE") || err.starts_with("error chunk") {
        Outcome::Error(err)
    } else {
        Outcome::Lost(err)
    }
}

struct Record {
    kind: Kind,
    start_s: f64,
    e2e_s: f64,
    outcome: Outcome,
}

const QUESTIONS: [&str; 6] = [
    "What does a borrow checker check?",
    "Write a haiku about caches.",
    "How do I read a file line by line in Python?",
    "Explain tensor parallelism in two sentences.",
    "List three prime numbers and say why they are prime.",
    "What is the difference between a thread and a process?",
];

/// Malformed bodies a careless client sends; each must come back as a 400 with a message.
const BAD: [&str; 4] = [
    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}",
    "{\"messages\": \"hi\"}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": -1}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tool_choice\": \"required\"}",
];

/// A plain chat reply checked for shape: a message, a known finish reason, no more tokens than asked.
fn check_chat(status: u16, text: &str, max_tokens: u64, tools: bool) -> Outcome {
    if status != 200 {
        return classify(format!("HTTP {status}: {}", text.chars().take(300).collect::<String>()));
    }
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return Outcome::Error(format!("reply is not JSON: {text}"));
    };
    let c = &v["choices"][0];
    let finish = c["finish_reason"].as_str().unwrap_or("");
    let used = v["usage"]["completion_tokens"].as_u64().unwrap_or(u64::MAX);
    if !c["message"].is_object() || !["stop", "length", "tool_calls"].contains(&finish) || used > max_tokens {
        return Outcome::Error(format!("bad reply (finish `{finish}`, {used} tokens of {max_tokens}): {text}"));
    }
    let calls = c["message"]["tool_calls"].as_array().map_or(&[][..], Vec::as_slice);
    // A tool call must name the offered function and carry JSON arguments, whatever the model chose to say.
    let bad_call = calls.iter().find(|t| {
        t["function"]["name"] != "get_weather"
            || t["function"]["arguments"].as_str().is_none_or(|a| serde_json::from_str::<Value>(a).is_err())
    });
    match bad_call {
        Some(t) if tools => Outcome::Error(format!("bad tool call: {t}")),
        Some(t) => Outcome::Error(format!("a tool call without tools: {t}")),
        None => Outcome::Ok,
    }
}

struct Worker<'a> {
    o: &'a Options,
    client: Client,
    model: &'a str,
    rng: SplitMix64,
    code: &'a Mutex<Corpus>,
    n: u64,
}

impl Worker<'_> {
    fn chat_body(&mut self, stream: bool) -> (Value, u64) {
        let max = 1 + self.rng.next_u64() % self.o.max_tokens;
        let q = QUESTIONS[(self.rng.next_u64() % QUESTIONS.len() as u64) as usize];
        let temperature = if self.rng.next_u64().is_multiple_of(2) { 0.0 } else { 0.8 };
        let mut b = json!({
            "model": self.model, "max_tokens": max, "temperature": temperature, "seed": self.n,
            "messages": [{"role": "user", "content": format!("{q} (request {})", self.n)}],
        });
        if stream {
            b["stream"] = json!(true);
            b["stream_options"] = json!({"include_usage": true});
        }
        (b, max)
    }

    fn one(&mut self, kind: Kind) -> Outcome {
        self.n += 1;
        match kind {
            Kind::Chat | Kind::Tool => {
                let (mut b, max) = self.chat_body(false);
                if kind == Kind::Tool {
                    let params =
                        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
                    b["tools"] = json!([{"type": "function", "function": {"name": "get_weather",
                        "description": "The weather in a city", "parameters": params}}]);
                    b["messages"][0]["content"] = json!("What is the weather in Lisbon? Use the tool.");
                }
                match self.client.post_text("/v1/chat/completions", b.to_string().as_bytes()) {
                    Ok((status, text)) => check_chat(status, &text, max, kind == Kind::Tool),
                    Err(e) => Outcome::Lost(e),
                }
            }
            Kind::Stream => {
                let (b, max) = self.chat_body(true);
                self.streamed("/v1/chat/completions", &b, max)
            }
            Kind::Long => {
                let tag = format!("Soak long prompt {}", self.n);
                let seed = self.rng.next_u64();
                let prompt = self
                    .code
                    .lock()
                    .prompt(&self.client, self.model, Sizing::Estimate, self.o.long_tokens, &tag, seed)
                    .0;
                let max = 1 + self.rng.next_u64() % self.o.max_tokens.min(16);
                let b = json!({"model": self.model, "prompt": prompt, "max_tokens": max, "temperature": 0,
                    "stream": true, "stream_options": {"include_usage": true}});
                self.streamed("/v1/completions", &b, max)
            }
            Kind::Cancel => {
                let (mut b, _) = self.chat_body(true);
                b["max_tokens"] = json!(self.o.max_tokens.max(32));
                match self.client.stream_then_hang_up("/v1/chat/completions", &b) {
                    Ok(true) => Outcome::Cancelled,
                    Ok(false) => Outcome::Ok,
                    Err(e) => classify(e),
                }
            }
            Kind::Bad => {
                let body = BAD[(self.n % BAD.len() as u64) as usize];
                match self.client.post_text("/v1/chat/completions", body.as_bytes()) {
                    Ok((400, text)) => match serde_json::from_str::<Value>(&text) {
                        Ok(v) if v["error"]["message"].is_string() => Outcome::Ok,
                        _ => Outcome::Error(format!("a 400 without an OpenAI error body: {text}")),
                    },
                    Ok((status, text)) => classify(format!("HTTP {status} for a malformed body ({body}): {text}")),
                    Err(e) => Outcome::Lost(e),
                }
            }
        }
    }

    fn streamed(&self, path: &str, body: &Value, max: u64) -> Outcome {
        let t = self.client.stream(path, body);
        match (t.error, t.completion_tokens) {
            (Some(e), _) => classify(e),
            (None, Some(n)) if n <= max => Outcome::Ok,
            (None, n) => Outcome::Error(format!("stream usage says {n:?} completion tokens of at most {max}")),
        }
    }
}

/// One look at the server: /health's status and latency, memory, running requests.
struct Sample {
    t_s: f64,
    health: u16,
    health_ms: f64,
    rss: Option<u64>,
    running: Option<f64>,
}

/// A metric's value from Prometheus text, by exact name (labels included).
fn metric(text: &str, name: &str) -> Option<f64> {
    // vLLM labels its gauges (`{model_name="…"}`), so a name may be followed by labels; the value is the last field.
    let line = text.lines().find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with([' ', '{'])))?;
    line.split_whitespace().last()?.parse().ok()
}

fn sample(client: &Client, pid: Option<u32>, t0: Instant) -> Sample {
    let (health, health_ms) = client.get_text("/health").map_or((0, f64::NAN), |(s, _, dt)| (s, dt * 1e3));
    let text = client.get_text("/metrics").map(|r| r.1).unwrap_or_default();
    let rss = metric(&text, "process_resident_memory_bytes")
        .map(|v| v as u64)
        .or_else(|| pid.and_then(|p| tf_server::http::resident_bytes(Some(p))));
    let running = metric(&text, "tf:num_requests_running").or_else(|| metric(&text, "vllm:num_requests_running"));
    Sample { t_s: t0.elapsed().as_secs_f64(), health, health_ms, rss, running }
}

/// Memory is flat when the largest RSS of the last quarter is within `limit` of the largest of the second (after warm-up).
fn memory(samples: &[Sample], duration: f64, limit: f64) -> Value {
    let max_in = |a: f64, b: f64| {
        samples.iter().filter(|s| s.t_s >= a * duration && s.t_s < b * duration).filter_map(|s| s.rss).max()
    };
    let (warm, last) = (max_in(0.25, 0.5), max_in(0.75, 1.0));
    let growth = warm.zip(last).map(|(w, l)| l as f64 / w.max(1) as f64 - 1.0);
    let series: Vec<Value> = samples.iter().filter_map(|s| s.rss.map(|r| json!([s.t_s, r]))).collect();
    json!({"rss_bytes": series, "second_quarter_max": warm, "last_quarter_max": last, "growth": growth,
        "max_growth": limit, "flat": growth.map(|g| g <= limit)})
}

fn soak(o: &Options, args: &[String]) -> Result<bool, String> {
    let client = o.target.client(None);
    let served = client.model_id()?;
    let model = o.target.model.clone().unwrap_or_else(|| served.clone());
    let code = Mutex::new(corpus(&crate::workspace_root(), "code")?);
    eprintln!("soak: {} serving `{served}`: {:.0} s at concurrency {}", o.target.url, o.duration_s, o.concurrency);
    let records = Mutex::new(Vec::<Record>::new());
    let samples = Mutex::new(Vec::<Sample>::new());
    let t0 = Instant::now();
    let deadline = Duration::from_secs_f64(o.duration_s);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..o.concurrency)
            .map(|w| {
                let (records, code, model, client) = (&records, &code, model.as_str(), client.clone());
                scope.spawn(move || {
                    let rng = SplitMix64::new(o.seed.wrapping_mul(1_000_003).wrapping_add(w as u64));
                    let mut worker = Worker { o, client, model, rng, code, n: (w as u64) << 32 };
                    let mut sent = 0;
                    while t0.elapsed() < deadline {
                        // Each worker first sends one of every kind, the workers starting spread over the list, so even a short soak covers the mix.
                        let kind = match MIX.get(sent) {
                            Some(_) => MIX[(sent + w * MIX.len() / o.concurrency) % MIX.len()].0,
                            None => Kind::draw(&mut worker.rng),
                        };
                        sent += 1;
                        let start = t0.elapsed();
                        let outcome = worker.one(kind);
                        let (start_s, e2e_s) = (start.as_secs_f64(), (t0.elapsed() - start).as_secs_f64());
                        records.lock().push(Record { kind, start_s, e2e_s, outcome });
                    }
                })
            })
            .collect();
        while workers.iter().any(|w| !w.is_finished()) {
            let s = sample(&client, o.pid, t0);
            let n = records.lock().len();
            progress(&format!(
                "soak: {:.0}/{:.0} s, {n} requests, /health {} in {:.1} ms",
                s.t_s, o.duration_s, s.health, s.health_ms
            ));
            samples.lock().push(s);
            let next = Instant::now() + Duration::from_secs_f64(o.sample_s);
            while Instant::now() < next && workers.iter().any(|w| !w.is_finished()) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });
    eprintln!();
    let wall = t0.elapsed().as_secs_f64();
    // After the last reply, every lane must come free: a request the server still runs for nobody is a leak.
    let drain = Instant::now();
    let mut last = sample(&client, o.pid, t0);
    while last.running.is_some_and(|r| r > 0.0) && drain.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
        last = sample(&client, o.pid, t0);
    }
    let lanes_free_s = last.running.map(|r| (r == 0.0).then(|| drain.elapsed().as_secs_f64()));
    let (records, mut samples) = (records.into_inner(), samples.into_inner());
    samples.push(last);
    let receipt = receipt(o, args, &served, &records, &samples, wall, lanes_free_s);
    print_summary(&receipt);
    write_receipt(o.out.as_deref(), &receipt)?;
    Ok(receipt["pass"] == true)
}

fn receipt(
    o: &Options,
    args: &[String],
    served: &str,
    records: &[Record],
    samples: &[Sample],
    wall: f64,
    lanes_free_s: Option<Option<f64>>,
) -> Value {
    let count = |rs: &[&Record], f: fn(&Outcome) -> bool| rs.iter().filter(|r| f(&r.outcome)).count();
    let tally = |rs: &[&Record]| {
        json!({"sent": rs.len(), "ok": count(rs, |o| matches!(o, Outcome::Ok)),
            "refused": count(rs, |o| matches!(o, Outcome::Refused)),
            "cancelled": count(rs, |o| matches!(o, Outcome::Cancelled)),
            "errors": count(rs, |o| matches!(o, Outcome::Error(_))), "lost": count(rs, |o| matches!(o, Outcome::Lost(_))),
            "e2e_s": stats(rs.iter().map(|r| r.e2e_s).collect())})
    };
    let all: Vec<&Record> = records.iter().collect();
    let by_kind: serde_json::Map<String, Value> = MIX
        .iter()
        .map(|(k, _)| (k.name().to_string(), tally(&records.iter().filter(|r| r.kind == *k).collect::<Vec<_>>())))
        .collect();
    let failures: Vec<Value> = records
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Error(e) => Some(json!({"kind": r.kind.name(), "at_s": r.start_s, "error": e})),
            Outcome::Lost(e) => Some(json!({"kind": r.kind.name(), "at_s": r.start_s, "lost": e})),
            _ => None,
        })
        .take(50)
        .collect();
    let healths: Vec<f64> = samples.iter().filter(|s| s.health == 200).map(|s| s.health_ms).collect();
    let not_ok = samples.iter().filter(|s| s.health != 200).count();
    let mem = memory(samples, o.duration_s, o.max_rss_growth);
    let totals = tally(&all);
    let drained = lanes_free_s.is_none_or(|f| f.is_some());
    // A server that refuses everything has lost nothing, but it served nobody either.
    let any_ok = totals["ok"].as_u64().is_some_and(|n| n > 0);
    let pass = any_ok && totals["errors"] == 0 && totals["lost"] == 0 && not_ok == 0 && mem["flat"] != false && drained;
    json!({
        "tool": "cargo xtask soak", "command": format!("cargo xtask soak {}", args.join(" ")), "url": o.target.url,
        "model": served, "unix_time": SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "duration_s": o.duration_s, "wall_s": wall, "concurrency": o.concurrency, "seed": o.seed,
        "max_tokens": o.max_tokens, "long_tokens": o.long_tokens,
        "mix": MIX.iter().map(|(k, w)| json!({"kind": k.name(), "weight": w})).collect::<Vec<_>>(),
        "totals": totals, "by_kind": by_kind, "failures": failures,
        "health": {"polls": samples.len(), "not_200": not_ok, "ms": stats(healths)},
        "memory": mem, "lanes_free_after_s": lanes_free_s.flatten(), "lanes_drained": drained, "pass": pass,
    })
}

fn print_summary(r: &Value) {
    println!("| kind | sent | ok | refused | cancelled | errors | lost | e2e p50 (s) | e2e p99 (s) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let rows = r["by_kind"].as_object().into_iter().flatten().map(|(k, v)| (k.as_str(), v));
    for (k, v) in rows.chain([("all", &r["totals"])]) {
        let p = |q: &str| v["e2e_s"][q].as_f64().map_or("-".into(), |x| format!("{x:.3}"));
        println!(
            "| {k} | {} | {} | {} | {} | {} | {} | {} | {} |",
            v["sent"],
            v["ok"],
            v["refused"],
            v["cancelled"],
            v["errors"],
            v["lost"],
            p("p50"),
            p("p99")
        );
    }
    let m = &r["memory"];
    println!(
        "memory: second-quarter max {} B, last-quarter max {} B, growth {} (limit {}), flat {}; /health p99 {} ms, {} not 200; lanes drained {}; pass {}",
        m["second_quarter_max"],
        m["last_quarter_max"],
        m["growth"],
        m["max_growth"],
        m["flat"],
        r["health"]["ms"]["p99"],
        r["health"]["not_200"],
        r["lanes_drained"],
        r["pass"]
    );
}

/// `cargo xtask soak`: 0 when nothing failed, nothing was lost and memory stayed flat; 1 otherwise; 2 for a bad command line.
pub fn run(args: &[String]) -> ExitCode {
    let o = match Options::parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("soak: {e}\n{USAGE}");
            return ExitCode::from(crate::USAGE_ERROR);
        }
    };
    match soak(&o, args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!(
                "soak: FAIL (errors, lost requests, /health, memory growth or lanes left running; see the table)"
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t_s: f64, rss: u64) -> Sample {
        Sample { t_s, health: 200, health_ms: 1.0, rss: Some(rss), running: Some(0.0) }
    }

    #[test]
    fn memory_is_flat_only_within_the_limit() {
        let steady: Vec<Sample> = (0..40).map(|i| at(i as f64, 100 + i % 3)).collect();
        assert_eq!(memory(&steady, 40.0, 0.1)["flat"], true);
        let leak: Vec<Sample> = (0..40).map(|i| at(i as f64, 100 + 5 * i)).collect();
        let m = memory(&leak, 40.0, 0.1);
        assert_eq!(m["flat"], false, "{m}");
        assert!(m["growth"].as_f64().unwrap() > 0.5, "{m}");
        assert!(memory(&[], 40.0, 0.1)["flat"].is_null(), "no samples, no verdict");
    }

    #[test]
    fn metrics_are_read_with_or_without_labels() {
        let text = "# HELP x\ntf:num_requests_running_max 9\ntf:num_requests_running 2\nvllm:num_requests_running{model_name=\"m\"} 3.0\n";
        assert_eq!(metric(text, "tf:num_requests_running"), Some(2.0));
        assert_eq!(metric(text, "vllm:num_requests_running"), Some(3.0));
        assert_eq!(metric(text, "process_resident_memory_bytes"), None);
    }

    #[test]
    fn replies_are_classified_by_what_went_wrong() {
        assert!(matches!(classify("HTTP 429: full".into()), Outcome::Refused));
        assert!(matches!(classify("HTTP 500: boom".into()), Outcome::Error(_)));
        assert!(matches!(classify("the stream ended without [DONE]".into()), Outcome::Lost(_)));
        assert!(matches!(classify("POST /v1/completions: connection reset".into()), Outcome::Lost(_)));
        let ok = r#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"completion_tokens":3}}"#;
        assert!(matches!(check_chat(200, ok, 4, false), Outcome::Ok));
        assert!(matches!(check_chat(200, ok, 2, false), Outcome::Error(_)), "more tokens than asked");
        let call = r#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"rm","arguments":"{}"}}]},
            "finish_reason":"tool_calls"}],"usage":{"completion_tokens":3}}"#;
        assert!(matches!(check_chat(200, call, 4, true), Outcome::Error(_)), "a function nobody offered");
    }
}
