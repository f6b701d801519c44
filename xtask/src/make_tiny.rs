//! `cargo xtask make-tiny`: a deterministic synthetic dsv41 checkpoint in the official layout.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tf_dsv41::tiny::{TinyKind, write_checkpoint};

const USAGE: &str = "\
usage: cargo xtask make-tiny --out DIR [--config tiny|small] [--seed N]

  --out DIR        directory to write (created if needed; existing files are overwritten)
  --config NAME    tiny (spec §18, vocab 512, default) or small (dim 128, DeepSeek-V4 tokenizer)
  --seed N         weight seed (default 0); the same seed gives byte-identical files";

#[derive(Debug, PartialEq)]
struct Options {
    out: PathBuf,
    kind: TinyKind,
    seed: u64,
}

/// Returns `Ok(None)` when help was asked for.
fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let (mut out, mut kind, mut seed) = (None, TinyKind::Tiny, 0u64);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_owned())),
            None => (arg.as_str(), None),
        };
        if matches!(flag, "-h" | "--help") {
            return Ok(None);
        }
        let mut value = || inline.clone().or_else(|| args.next().cloned()).ok_or(format!("{flag} needs a value"));
        match flag {
            "--out" => out = Some(PathBuf::from(value()?)),
            "--config" => kind = value()?.parse()?,
            "--seed" => seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    let out = out.ok_or("--out DIR is required")?;
    Ok(Some(Options { out, kind, seed }))
}

pub(crate) fn run(args: &[String]) -> ExitCode {
    let opts = match parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(crate::USAGE_ERROR);
        }
    };
    let start = Instant::now();
    match write_checkpoint(opts.kind, opts.seed, &opts.out) {
        Ok(w) => {
            let files: u64 = w.files.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum();
            println!(
                "wrote {} checkpoint (seed {}) to {}: {} tensors, {} files, {:.1} MB in {:.2?}",
                opts.kind.name(),
                opts.seed,
                opts.out.display(),
                w.n_tensors,
                w.files.len(),
                files as f64 / 1e6,
                start.elapsed()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: make-tiny: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn parses_flags_in_both_forms() {
        let o = parse(&args("--out d --config=small --seed 9")).unwrap().unwrap();
        assert_eq!(o, Options { out: PathBuf::from("d"), kind: TinyKind::Small, seed: 9 });
        let o = parse(&args("--out=d")).unwrap().unwrap();
        assert_eq!((o.kind, o.seed), (TinyKind::Tiny, 0));
        assert!(parse(&args("--config tiny")).is_err(), "--out is required");
        assert!(parse(&args("--out d --config big")).is_err());
        assert!(parse(&args("--out d --seed x")).is_err());
        assert_eq!(parse(&args("--help")).unwrap(), None);
    }
}
