//! `cargo xtask make-tiny`: a deterministic synthetic dsv41 checkpoint in the official layout.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tf_dsv41::tiny::exl3::{Codebook, Exl3Mode, convert};
use tf_dsv41::tiny::{TinyKind, write_checkpoint};

const USAGE: &str = "\
usage: cargo xtask make-tiny --out DIR [--config tiny|small] [--seed N] [--weights fp8|exl3] [--exl3 random|quantize]

  --out DIR        directory to write (created if needed; existing files are overwritten)
  --config NAME    tiny (spec §18, vocab 512, default) or small (dim 128, DeepSeek-V4 tokenizer)
  --seed N         weight seed (default 0); the same seed gives byte-identical files
  --weights F      fp8 (the official FP8/FP4 layout, default) or exl3 (every FP8/FP4 linear as an EXL3 MUL1 trellis)
  --exl3 MODE      random (streams at the source's scale, instant; default) or quantize (a Viterbi per tile, slow)";

#[derive(Debug, PartialEq)]
struct Options {
    out: PathBuf,
    kind: TinyKind,
    seed: u64,
    exl3: Option<Exl3Mode>,
}

/// Returns `Ok(None)` when help was asked for.
fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let (mut out, mut kind, mut seed) = (None, TinyKind::Tiny, 0u64);
    let (mut weights, mut mode) = (String::from("fp8"), Exl3Mode::Random);
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
            "--config" => kind = value()?.parse().map_err(|e: tf_dsv41::tiny::UnknownTinyKind| e.to_string())?,
            "--seed" => seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--weights" => weights = value()?,
            "--exl3" => {
                mode = match value()?.as_str() {
                    "random" => Exl3Mode::Random,
                    "quantize" => Exl3Mode::Quantize,
                    m => return Err(format!("--exl3: `{m}` is not random or quantize")),
                }
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    let out = out.ok_or("--out DIR is required")?;
    let exl3 = match weights.as_str() {
        "fp8" => None,
        "exl3" => Some(mode),
        w => return Err(format!("--weights: `{w}` is not fp8 or exl3")),
    };
    Ok(Some(Options { out, kind, seed, exl3 }))
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
    if let Some(mode) = opts.exl3 {
        return exl3(&opts, mode, start);
    }
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

/// The FP8 checkpoint written beside `out`, converted into `out`, then removed.
fn exl3(opts: &Options, mode: Exl3Mode, start: Instant) -> ExitCode {
    let src = opts.out.join(".fp8-source");
    let result = write_checkpoint(opts.kind, opts.seed, &src)
        .map_err(|e| e.to_string())
        .and_then(|_| convert(&src, &opts.out, Codebook::Mul1, mode, opts.seed).map_err(|e| e.to_string()));
    let _ = std::fs::remove_dir_all(&src);
    match result {
        Ok(n) => {
            println!(
                "wrote {} EXL3 checkpoint ({n} linears, {mode:?}) to {} in {:.2?}",
                opts.kind.name(),
                opts.out.display(),
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
        assert_eq!(o, Options { out: PathBuf::from("d"), kind: TinyKind::Small, seed: 9, exl3: None });
        let o = parse(&args("--out d --weights exl3 --exl3 quantize")).unwrap().unwrap();
        assert_eq!(o.exl3, Some(Exl3Mode::Quantize));
        assert!(parse(&args("--out d --weights int4")).is_err());
        assert!(parse(&args("--out d --exl3 best")).is_err());
        let o = parse(&args("--out=d")).unwrap().unwrap();
        assert_eq!((o.kind, o.seed), (TinyKind::Tiny, 0));
        assert!(parse(&args("--config tiny")).is_err(), "--out is required");
        assert!(parse(&args("--out d --config big")).is_err());
        assert!(parse(&args("--out d --seed x")).is_err());
        assert_eq!(parse(&args("--help")).unwrap(), None);
    }
}
