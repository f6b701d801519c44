//! `cargo xtask gate`: the exact path and a candidate teacher-forced on a fixed prompt set, scored against declared thresholds.

use crate::gate_stats::{RowScore, Summary, Tally, Thresholds, score_row, valid_cuts};
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
    pub sequential_sums: bool,
    pub sequential_wo_a: bool,
    pub exl3_fast: bool,
    pub exl3_prompt_gemm: bool,
    pub prefill_mxfp4: bool,
    pub cuda_graphs: bool,
    /// Routed experts past 0.85 of a row's routing weight skipped (issue 24 item 5's threshold).
    pub expert_top_p: bool,
}

impl Switches {
    /// A comma list: `exact` (nothing), `sequential-sums`, `sequential-wo-a`, `exl3-fast`, `exl3-prompt-gemm`, `prefill-mxfp4`, `cuda-graphs`, `expert-top-p`.
    pub fn parse(list: &str) -> Result<Switches, String> {
        let mut s = Switches::default();
        for name in list.split(',').map(str::trim) {
            match name {
                "" | "exact" => {}
                "sequential-sums" => s.sequential_sums = true,
                "sequential-wo-a" => s.sequential_wo_a = true,
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
            sequential_sums: self.sequential_sums,
            sequential_wo_a: self.sequential_wo_a,
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
    /// Which rows to score: the prompts' own next tokens, greedy rows, or both; `None`: every set the thresholds declare.
    pub rows: Option<Rows>,
    /// Greedy rows: tokens generated at each cut and the cuts; `None`: as declared (else 64 at 1/8, 2/8, 3/8 and 4/8).
    pub greedy: Option<usize>,
    pub cuts: Option<Vec<f64>>,
}

/// The row sets a gate run scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    /// Each prompt's own next tokens after its head (the reference continuation).
    pub text: bool,
    /// The exact path's greedy tokens at cuts of each prompt, the candidate teacher-forced on them.
    pub greedy: bool,
}

/// Greedy rows when the thresholds declare none: 64 tokens at these shares of each prompt.
const GREEDY_TOKENS: usize = 64;
const GREEDY_CUTS: [f64; 4] = [0.125, 0.25, 0.375, 0.5];

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
        rows: None,
        greedy: None,
        cuts: None,
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
            "--rows" => {
                let v = value()?;
                let set: Vec<&str> = v.split(',').map(str::trim).collect();
                if set.iter().any(|r| !matches!(*r, "text" | "greedy")) {
                    return Err(format!("--rows: a comma list of text, greedy (got `{v}`)"));
                }
                a.rows = Some(Rows { text: set.contains(&"text"), greedy: set.contains(&"greedy") });
            }
            "--greedy" => a.greedy = Some(num(value()?)?.max(1)),
            "--cuts" => {
                let v = value()?;
                let cuts: Option<Vec<f64>> = v.split(',').map(|f| f.trim().parse().ok()).collect();
                a.cuts =
                    Some(cuts.and_then(valid_cuts).ok_or_else(|| format!("--cuts: shares in [0, 1) (got `{v}`)"))?);
            }
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

/// Counts one scored row under its prompt's kind and under `all`.
fn tally(t: &mut Tallies, kind: &str, r: RowScore) {
    t.entry(kind.to_string()).or_default().push(r);
    t.entry("all".into()).or_default().push(r);
}

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
        let mut score_rows = |rows: Vec<(Vec<f32>, Vec<f32>)>, first: usize| {
            for (i, (e, c)) in rows.iter().enumerate() {
                tally(&mut t, &p.kind, score_row(e, c, p.ids[first + i]));
            }
        };
        score_rows(vec![(re, rc)], head);
        let mut at = head;
        while at < stop {
            let end = (at + a.window).min(stop);
            let (de, dc) = (exact.decode(&mut le, &p.ids[at..end])?, cand.decode(&mut lc, &p.ids[at..end])?);
            score_rows(de.into_iter().zip(dc).collect(), at + 1);
            at = end;
        }
        let scored = want;
        left -= scored;
        eprintln!("gate: {} ({}): {scored} positions after a {head}-token prefill", p.name, p.kind);
    }
    Ok(t)
}

/// The distinct heads of a prompt of `n` tokens at each cut (int(n * f) in [1, n-1]), as tools/golden/noise_floor.py's.
pub fn cut_heads(n: usize, cuts: &[f64]) -> Vec<usize> {
    let mut heads: Vec<usize> =
        cuts.iter().map(|&f| ((n as f64 * f) as usize).clamp(1, n.saturating_sub(1).max(1))).collect();
    heads.sort_unstable();
    heads.dedup();
    heads
}

/// Greedy rows: at each cut the exact path generates `tokens` by decode steps (stopping after an end of text); the candidate follows them in windows.
fn score_greedy<F: Family>(
    exact: &F,
    cand: &F,
    prompts: &[Prompt],
    a: &Args,
    (tokens, cuts): (usize, &[f64]),
) -> Result<Tallies, Box<dyn std::error::Error>> {
    let (mut t, eos) = (Tallies::new(), exact.eos_token());
    let mut left = a.max_positions.unwrap_or(usize::MAX);
    for p in prompts {
        let heads = cut_heads(p.ids.len(), cuts);
        for &head in &heads {
            let want = tokens.min(exact.max_context().saturating_sub(head)).min(left);
            if want == 0 || head >= p.ids.len() {
                continue;
            }
            let mut le = exact.new_lane()?;
            let mut row = exact.prefill(&mut le, &p.ids[..head], true)?.ok_or("prefill gave no logits")?;
            let (mut rows_e, mut toks) = (Vec::new(), Vec::<u32>::new());
            while toks.len() < want && toks.last() != Some(&eos) {
                if let Some(&tok) = toks.last() {
                    row = exact.decode(&mut le, &[tok])?.pop().ok_or("decode gave no logits")?;
                }
                toks.push(tf_core::ops::argmax(&row));
                rows_e.push(std::mem::take(&mut row));
            }
            let mut lc = cand.new_lane()?;
            let mut rows_c = vec![cand.prefill(&mut lc, &p.ids[..head], true)?.ok_or("prefill gave no logits")?];
            for w in toks[..toks.len() - 1].chunks(a.window) {
                rows_c.extend(cand.decode(&mut lc, w)?);
            }
            for ((e, c), &tok) in rows_e.iter().zip(&rows_c).zip(&toks) {
                tally(&mut t, &p.kind, score_row(e, c, tok));
            }
            left -= toks.len();
        }
        eprintln!("gate: {} ({}): greedy rows at heads {heads:?}", p.name, p.kind);
    }
    Ok(t)
}

/// What a run scores: the text rows and, when asked, greedy rows of `tokens` at `cuts`.
struct Plan<'a> {
    text: bool,
    greedy: Option<(usize, &'a [f64])>,
}

/// Loads both sides on one device through the server's loader and scores each row set asked for.
fn score_on(
    dir: &Path,
    a: &Args,
    sw: Switches,
    prompts: &[Prompt],
    plan: &Plan,
) -> Result<Vec<(&'static str, Tallies)>, String> {
    use tf_dsv41::family::Loaded;
    fn both<F: Family>(
        e: &F,
        c: &F,
        prompts: &[Prompt],
        a: &Args,
        plan: &Plan,
    ) -> Result<Vec<(&'static str, Tallies)>, Box<dyn std::error::Error>> {
        let mut out = Vec::new();
        if plan.text {
            out.push(("text", score(e, c, prompts, a)?));
        }
        if let Some(g) = plan.greedy {
            out.push(("greedy", score_greedy(e, c, prompts, a, g)?));
        }
        Ok(out)
    }
    let exact = Loaded::load(dir, tf_dsv41::Options::default(), a.device, false).map_err(|e| e.to_string())?;
    let cand = Loaded::load(dir, sw.options(), a.device, sw.cuda_graphs).map_err(|e| e.to_string())?;
    let scored = match (exact, cand) {
        (Loaded::Cpu(e), Loaded::Cpu(c)) => both(&*e, &*c, prompts, a, plan),
        (Loaded::Cuda(e), Loaded::Cuda(c)) => both(&*e, &*c, prompts, a, plan),
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
    let rows = a.rows.unwrap_or(Rows { text: true, greedy: th.greedy.is_some() });
    let declared = th.greedy.as_ref();
    let tokens = a.greedy.or(declared.map(|g| g.tokens)).unwrap_or(GREEDY_TOKENS);
    let cuts = a.cuts.clone().or(declared.map(|g| g.cuts.clone())).unwrap_or(GREEDY_CUTS.to_vec());
    let plan = Plan { text: rows.text, greedy: rows.greedy.then_some((tokens, &cuts[..])) };
    let sets = score_on(&dir, a, sw, &prompts, &plan)?;
    let mut failures = Vec::new();
    let mut unjudged = Vec::new();
    let mut by_rows = serde_json::Map::new();
    for (name, tallies) in &sets {
        let total: Summary = tallies.get("all").map(Tally::summary).ok_or(format!("no {name} row was scored"))?;
        for (kind, t) in tallies {
            println!("{}", t.summary().line(&format!("{name}:{kind}")));
        }
        let limits = match *name {
            "text" => Some(&th),
            _ => declared.filter(|g| g.tokens == tokens && g.cuts == cuts).map(|g| &*g.limits),
        };
        match limits {
            Some(l) => failures.extend(l.failures(&total).into_iter().map(|f| format!("{name} rows: {f}"))),
            None => unjudged.push(*name),
        }
        by_rows.insert(
            name.to_string(),
            tallies.iter().map(|(k, t)| (k.clone(), t.summary().to_json())).collect::<serde_json::Map<_, _>>().into(),
        );
    }
    // A run that leaves out a declared row set cannot pass.
    if !rows.text {
        unjudged.push("text");
    }
    if declared.is_some() && !rows.greedy {
        unjudged.push("greedy");
    }
    let verdict = match &th.gate_model {
        None => "no verdict: no gate model is declared in the thresholds yet (random models cannot gate)".to_string(),
        Some(g) if !th.judges(&sha) => {
            format!("no verdict: the thresholds are declared for checkpoint {g} and its listed copies, this is {sha}")
        }
        Some(_) if !failures.is_empty() => "fail".into(),
        Some(_) if !unjudged.is_empty() => {
            format!("no verdict: {} rows not scored or not declared", unjudged.join(" and "))
        }
        Some(_) => "pass".into(),
    };
    let report = json!({
        "model": dir.display().to_string(), "model_sha256": sha,
        "device": a.device.map_or("cpu".to_string(), |n| format!("cuda:{n}")),
        "candidate": a.candidate, "prefill_frac": a.prefill_frac, "window": a.window,
        "greedy": rows.greedy.then(|| json!({"tokens": tokens, "cuts": cuts})),
        "prompts": a.prompts.display().to_string(), "thresholds": th_json,
        "by_kind": by_rows.get("text").cloned().unwrap_or(Value::Null),
        "by_kind_greedy": by_rows.get("greedy").cloned().unwrap_or(Value::Null),
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

#[cfg(test)]
mod tests {
    use super::cut_heads;

    #[test]
    fn cut_heads_are_noise_floor_pys() {
        // The same cases as tools/golden/test_noise_floor.py, so the floor's greedy rows start where the gate's do.
        assert_eq!(cut_heads(74, &[0.125, 0.25, 0.375, 0.5]), [9, 18, 27, 37]);
        assert_eq!(cut_heads(6659, &[0.125, 0.25, 0.375, 0.5]), [832, 1664, 2497, 3329]);
        assert_eq!(cut_heads(3, &[0.0, 0.1, 0.9]), [1, 2]);
        assert_eq!(cut_heads(1, &[0.5]), [1]);
    }
}
