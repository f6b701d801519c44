//! `cargo xtask bench engram-reuse`: how many Engram reads real text repeats, to decide whether a hot-row cache pays.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tf_engram::{Clock, EngramConfig, NgramHasher, TokenMap};

const USAGE: &str = "usage: cargo xtask bench engram-reuse [--prompt N] [--chunk N] [--cache-rows N,N,...] [PATH ...] (default paths: docs crates README.md)";
/// Bytes a cached row holds (`CachedTable` keeps rows decoded: 256 bf16).
const ROW: f64 = 512.0;

/// Text files under `paths` (files as given, directories walked), sorted so a rerun reads the same stream.
fn files(paths: &[PathBuf], out: &mut Vec<PathBuf>) -> Result<(), String> {
    for p in paths {
        if p.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            entries.sort();
            files(&entries, out)?;
        } else if p
            .extension()
            .is_some_and(|x| ["rs", "md", "txt", "py", "cu", "toml"].contains(&x.to_str().unwrap_or("")))
        {
            out.push(p.clone());
        }
    }
    Ok(())
}

pub fn run(args: &[String]) -> Result<(), String> {
    let (mut prompt, mut chunk, mut caps) = (32_768usize, 4096usize, vec![65_536usize, 262_144, 1_048_576]);
    let mut paths = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value\n{USAGE}"));
        match a.as_str() {
            "--prompt" => prompt = value()?.parse().map_err(|e| format!("--prompt: {e}"))?,
            "--chunk" => chunk = value()?.parse().map_err(|e| format!("--chunk: {e}"))?,
            "--cache-rows" => {
                let v = value()?;
                caps = v
                    .split(',')
                    .map(|c| c.parse().map_err(|e| format!("--cache-rows: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            _ if a.starts_with("--") => return Err(format!("unknown flag {a}\n{USAGE}")),
            _ => paths.push(PathBuf::from(a)),
        }
    }
    if paths.is_empty() {
        paths = ["docs", "crates", "README.md"].iter().map(PathBuf::from).collect();
    }
    if prompt == 0 || chunk == 0 {
        return Err(format!("--prompt and --chunk must be positive\n{USAGE}"));
    }
    let mut list = Vec::new();
    files(&paths, &mut list)?;
    let tok_path = Path::new("assets/deepseek-v4/tokenizer.json");
    let tok = tokenizers::Tokenizer::from_file(tok_path).map_err(|e| format!("{}: {e}", tok_path.display()))?;
    let mut ids = Vec::new();
    for f in &list {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        ids.extend(tok.encode(text.as_str(), false).map_err(|e| format!("{}: {e}", f.display()))?.get_ids());
    }
    let map = Arc::new(TokenMap::deepseek_v4().map_err(|e| e.to_string())?);
    let hasher = NgramHasher::new(&EngramConfig::deepseek_v41_flash(), map).map_err(|e| e.to_string())?;
    let prompts: Vec<&[u32]> = ids.chunks_exact(prompt).collect();
    if prompts.is_empty() {
        return Err(format!("{} files hold {} tokens, less than one {prompt}-token prompt", list.len(), ids.len()));
    }
    println!(
        "{} files, {} tokens: {} prompts of {prompt} in chunks of {chunk}, V4.1-Flash hashing",
        list.len(),
        ids.len(),
        prompts.len()
    );
    let (mut total, mut per_chunk, mut per_prompt) = (0usize, 0usize, 0usize);
    let mut clocks: Vec<Clock> = caps.iter().map(|&c| Clock::new(c)).collect();
    let mut misses = vec![0usize; caps.len()];
    for p in &prompts {
        let got = hasher.hash_tokens(&mut hasher.history(), p, None).map_err(|e| e.to_string())?;
        let cols = got.cols();
        let mut seen = HashSet::new();
        for c in 0..p.len().div_ceil(chunk) {
            let (t0, t1) = (c * chunk, ((c + 1) * chunk).min(p.len()));
            // Keys name (layer, row): the two layers are two tables.
            let mut keys: Vec<u64> = (0..2)
                .flat_map(|l| got.layer(l)[t0 * cols..t1 * cols].iter().map(move |&id| (l as u64) << 40 | id))
                .collect();
            total += keys.len();
            keys.sort_unstable();
            keys.dedup();
            per_chunk += keys.len();
            for &k in &keys {
                seen.insert(k);
                for (clock, miss) in clocks.iter_mut().zip(&mut misses) {
                    *miss += usize::from(!clock.touch(k));
                }
            }
        }
        per_prompt += seen.len();
    }
    let of = |n: usize| n as f64 / per_chunk as f64;
    println!(
        "ids hashed: {total}; reads today (distinct per chunk): {per_chunk} = {:.3} of the ids",
        per_chunk as f64 / total as f64
    );
    println!("distinct per prompt (a per-prompt row cache): {per_prompt} = {:.3} of today's reads", of(per_prompt));
    for (cap, miss) in caps.iter().zip(&misses) {
        println!(
            "hot-row cache (CachedTable's CLOCK) of {cap} rows ({:.0} MB), across the prompts: {miss} reads = {:.3} of today's",
            *cap as f64 * ROW / 1e6,
            of(*miss)
        );
    }
    Ok(())
}
