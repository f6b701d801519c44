//! `cargo xtask gate`: the exact path and a candidate teacher-forced on a fixed prompt set, scored against declared thresholds.

use crate::gate_stats::{Summary, Tally, Thresholds, score_row};
use crate::{USAGE_ERROR, usage_error, workspace_root};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tf_server::lanes::Family;
use tf_server::tokenizer::Tokenizer;

/// The share `expert-top-p` keeps: the routing weight past which issue 24 item 5 skips experts.
pub const EXPERT_TOP_P: f32 = 0.85;

/// The numerics switches a candidate may turn on (the exact path has none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Switches {
    pub wide_sums: bool,
    pub exl3_fast: bool,
    pub exl3_prompt_gemm: bool,
    pub prefill_mxfp4: bool,
    pub cuda_graphs: bool,
    /// Routed experts past 0.85 of a row's routing weight skipped (issue 24 item 5's threshold).
    pub expert_top_p: bool,
}

impl Switches {
    /// A comma list: `exact` (nothing), `wide-sums`, `exl3-fast`, `exl3-prompt-gemm`, `prefill-mxfp4`, `cuda-graphs`, `expert-top-p`.
    pub fn parse(list: &str) -> Result<Switches, String> {
        let mut s = Switches::default();
        for name in list.split(',').map(str::trim) {
            match name {
                "" | "exact" => {}
                "wide-sums" => s.wide_sums = true,
                "exl3-fast" => s.exl3_fast = true,
                "exl3-prompt-gemm" => s.exl3_prompt_gemm = true,
                "prefill-mxfp4" => s.prefill_mxfp4 = true,
                "cuda-graphs" => s.cuda_graphs = true,
                "expert-top-p" => s.expert_top_p = true,
                other => return Err(format!("unknown switch `{other}`")),
            }
        }
        Ok(s)
    }

    /// The model options these switches give, with `tf serve`'s defaults for their row thresholds.
    pub fn options(self) -> tf_dsv41::Options {
        tf_dsv41::Options {
            wide_sums: self.wide_sums,
            exl3_fast: self.exl3_fast,
            exl3_prompt_gemm: self.exl3_prompt_gemm.then_some(tf_dsv41::EXL3_PROMPT_MIN_ROWS),
            prefill_mxfp4: self.prefill_mxfp4.then_some(tf_dsv41::PrefillMxfp4::DEFAULT),
            expert_top_p: self.expert_top_p.then(|| tf_dsv41::TopP::new(EXPERT_TOP_P).expect("a share in (0, 1]")),
            ..tf_dsv41::Options::default()
        }
    }
}

/// Everything `cargo xtask gate` is told.
#[derive(Clone, Debug)]
pub struct Args {
    pub model: Option<PathBuf>,
    pub device: Option<usize>,
    pub candidate: String,
    pub prompts: PathBuf,
    pub thresholds: PathBuf,
    /// Share of each prompt prefilled before the scored, teacher-forced rows.
    pub prefill_frac: f64,
    /// Decode rows per teacher-forced step.
    pub window: usize,
    pub max_positions: Option<usize>,
    pub out: Option<PathBuf>,
    /// Write the prompt set's ids (chats encoded by our encoder) here and stop, for tools/golden/noise_floor.py --ids.
    pub dump_ids: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let root = workspace_root();
    let mut a = Args {
        model: None,
        device: None,
        candidate: String::new(),
        prompts: root.join("assets/gate/prompts.json"),
        thresholds: root.join("assets/gate/thresholds.json"),
        prefill_frac: 0.5,
        window: 16,
        max_positions: None,
        out: None,
        dump_ids: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|_| format!("{flag}: `{v}` is not a whole number"));
        match flag.as_str() {
            "--model" => a.model = Some(value()?.into()),
            "--device" => {
                a.device = match value()?.as_str() {
                    "cpu" => None,
                    "cuda" => Some(0),
                    d => Some(
                        d.strip_prefix("cuda:").and_then(|n| n.parse().ok()).ok_or("--device: cpu, cuda, cuda:N")?,
                    ),
                }
            }
            "--candidate" => a.candidate = value()?,
            "--prompts" => a.prompts = value()?.into(),
            "--thresholds" => a.thresholds = value()?.into(),
            "--prefill-frac" => {
                let v = value()?;
                a.prefill_frac =
                    v.parse().ok().filter(|f| (0.0..1.0).contains(f)).ok_or("--prefill-frac: in [0, 1)")?;
            }
            "--window" => a.window = num(value()?)?.max(1),
            "--max-positions" => a.max_positions = Some(num(value()?)?),
            "--out" => a.out = Some(value()?.into()),
            "--dump-ids" => a.dump_ids = Some(value()?.into()),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    if a.candidate.is_empty() && a.dump_ids.is_none() {
        return Err("--candidate is required (a comma list; `exact` measures the exact path against itself)".into());
    }
    Ok(a)
}

pub fn run(args: &[String]) -> ExitCode {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => return usage_error(&e),
    };
    match gate(&a) {
        Ok(report) => {
            let verdict = report["verdict"].as_str().unwrap_or_default().to_string();
            println!("verdict: {verdict}");
            if verdict == "fail" { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
        Err(e) => {
            eprintln!("gate: {e}");
            ExitCode::from(if e.starts_with("usage:") { USAGE_ERROR } else { 1 })
        }
    }
}

/// One prompt of the set, as ids.
struct Prompt {
    name: String,
    kind: String,
    ids: Vec<u32>,
}

/// Reads the prompt set: texts get BOS and the tokenizer; chats are encoded as DeepSeek's V4.1 encoder does.
fn load_prompts(path: &Path, tok: &Tokenizer, bos: u32, max_len: usize) -> Result<Vec<Prompt>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let list = v["prompts"].as_array().ok_or_else(|| format!("{}: no `prompts` list", path.display()))?;
    let mut out = Vec::new();
    for p in list {
        let name = p["name"].as_str().unwrap_or("?").to_string();
        let kind = p["kind"].as_str().unwrap_or("text").to_string();
        let body = match (p.get("text"), p.get("messages")) {
            (Some(Value::String(t)), _) => t.clone(),
            (_, Some(m)) => {
                let msgs: Vec<tf_server::chat::ChatMessage> =
                    serde_json::from_value(m.clone()).map_err(|e| format!("prompt {name}: {e}"))?;
                let opts = tf_server::chat::ChatOptions {
                    thinking: p["thinking"].as_bool().unwrap_or(false),
                    ..Default::default()
                };
                tf_server::chat::encode_messages(&msgs, &[], &opts).map_err(|e| format!("prompt {name}: {e}"))?
            }
            _ => return Err(format!("prompt {name}: needs `text` or `messages`")),
        };
        let mut ids = tok.encode(&body, false).map_err(|e| format!("prompt {name}: {e}"))?;
        if ids.first() != Some(&bos) {
            ids.insert(0, bos);
        }
        if ids.len() > max_len {
            eprintln!("gate: prompt {name}: {} tokens cut to the model's {max_len}", ids.len());
            ids.truncate(max_len);
        }
        out.push(Prompt { name, kind, ids });
    }
    Ok(out)
}

/// sha256 over the checkpoint's shards in name order: the identity thresholds are declared for.
pub fn checkpoint_sha256(dir: &Path) -> Result<String, String> {
    let mut shards: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    shards.sort();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 8 << 20];
    for s in &shards {
        let mut f = std::fs::File::open(s).map_err(|e| format!("{}: {e}", s.display()))?;
        loop {
            let n = std::io::Read::read(&mut f, &mut buf).map_err(|e| format!("{}: {e}", s.display()))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Tallies per prompt kind and over all positions.
type Tallies = BTreeMap<String, Tally>;

/// Teacher-forces every prompt through both models in lockstep: prefill the head, then decode windows of the rest.
fn score<F: Family>(exact: &F, cand: &F, prompts: &[Prompt], a: &Args) -> Result<Tallies, Box<dyn std::error::Error>> {
    let mut t = Tallies::new();
    let mut left = a.max_positions.unwrap_or(usize::MAX);
    for p in prompts {
        let n = p.ids.len();
        let head = ((n as f64 * a.prefill_frac) as usize).clamp(1, n.saturating_sub(1).max(1));
        if head >= n || left == 0 {
            continue;
        }
        let (mut le, mut lc) = (exact.new_lane()?, cand.new_lane()?);
        let re = exact.prefill(&mut le, &p.ids[..head], true)?.ok_or("prefill gave no logits")?;
        let rc = cand.prefill(&mut lc, &p.ids[..head], true)?.ok_or("prefill gave no logits")?;
        let want = (n - head).min(left);
        let stop = head + want - 1;
        let mut tally = |rows: Vec<(Vec<f32>, Vec<f32>)>, first: usize| {
            for (i, (e, c)) in rows.iter().enumerate() {
                let r = score_row(e, c, p.ids[first + i]);
                t.entry(p.kind.clone()).or_default().push(r);
                t.entry("all".into()).or_default().push(r);
            }
        };
        tally(vec![(re, rc)], head);
        let mut at = head;
        while at < stop {
            let end = (at + a.window).min(stop);
            let (de, dc) = (exact.decode(&mut le, &p.ids[at..end])?, cand.decode(&mut lc, &p.ids[at..end])?);
            tally(de.into_iter().zip(dc).collect(), at + 1);
            at = end;
        }
        let scored = want;
        left -= scored;
        eprintln!("gate: {} ({}): {scored} positions after a {head}-token prefill", p.name, p.kind);
    }
    Ok(t)
}

/// Loads both sides on one device through the server's loader and scores them.
fn score_on(dir: &Path, a: &Args, sw: Switches, prompts: &[Prompt]) -> Result<Tallies, String> {
    use tf_dsv41::family::Loaded;
    let exact = Loaded::load(dir, tf_dsv41::Options::default(), a.device, false).map_err(|e| e.to_string())?;
    let cand = Loaded::load(dir, sw.options(), a.device, sw.cuda_graphs).map_err(|e| e.to_string())?;
    let scored = match (exact, cand) {
        (Loaded::Cpu(e), Loaded::Cpu(c)) => score(&*e, &*c, prompts, a),
        (Loaded::Cuda(e), Loaded::Cuda(c)) => score(&*e, &*c, prompts, a),
        _ => Err("the exact path and the candidate loaded on different devices".into()),
    };
    scored.map_err(|e| e.to_string())
}

/// Runs the gate and writes its receipt; the verdict is `pass`, `fail`, or `no verdict: …` off the gate model.
pub fn gate(a: &Args) -> Result<Value, String> {
    let sw = Switches::parse(&a.candidate).map_err(|e| format!("usage: --candidate: {e}"))?;
    let dir = tf_server::http::serve::model_dir(a.model.as_deref()).map_err(|e| e.to_string())?;
    let th_json: Value = serde_json::from_str(
        &std::fs::read_to_string(&a.thresholds).map_err(|e| format!("{}: {e}", a.thresholds.display()))?,
    )
    .map_err(|e| format!("{}: {e}", a.thresholds.display()))?;
    let th = Thresholds::from_json(&th_json)?;
    let tok = Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|e| e.to_string())?;
    let cfg = tf_dsv41::Config::load(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let prompts = load_prompts(&a.prompts, &tok, cfg.bos_token_id, cfg.max_seq_len.saturating_sub(1))?;
    if let Some(path) = &a.dump_ids {
        let list: Vec<Value> = prompts.iter().map(|p| json!({"name": p.name, "kind": p.kind, "ids": p.ids})).collect();
        let text = serde_json::to_string(&json!({"prompts": list})).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(json!({"verdict": format!("ids of {} prompts written to {}", list.len(), path.display())}));
    }
    let sha = checkpoint_sha256(&dir)?;
    let t0 = Instant::now();
    let tallies = score_on(&dir, a, sw, &prompts)?;
    let total: Summary = tallies.get("all").map(Tally::summary).ok_or("no position was scored")?;
    for (kind, t) in &tallies {
        println!("{}", t.summary().line(kind));
    }
    let failures = th.failures(&total);
    let verdict = match &th.gate_model {
        None => "no verdict: no gate model is declared in the thresholds yet (random models cannot gate)".to_string(),
        Some(g) if !th.judges(&sha) => {
            format!("no verdict: the thresholds are declared for checkpoint {g} and its listed copies, this is {sha}")
        }
        Some(_) if failures.is_empty() => "pass".into(),
        Some(_) => "fail".into(),
    };
    let report = json!({
        "model": dir.display().to_string(), "model_sha256": sha,
        "device": a.device.map_or("cpu".to_string(), |n| format!("cuda:{n}")),
        "candidate": a.candidate, "prefill_frac": a.prefill_frac, "window": a.window,
        "prompts": a.prompts.display().to_string(), "thresholds": th_json,
        "by_kind": tallies.iter().map(|(k, t)| (k.clone(), t.summary().to_json())).collect::<serde_json::Map<_, _>>(),
        "failures": failures, "verdict": verdict, "seconds": t0.elapsed().as_secs_f64(),
    });
    if let Some(out) = &a.out {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(out, text + "\n").map_err(|e| format!("{}: {e}", out.display()))?;
    }
    for f in report["failures"].as_array().into_iter().flatten() {
        println!("  {}", f.as_str().unwrap_or_default());
    }
    Ok(report)
}
