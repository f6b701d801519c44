//! Developer tasks for TensorFold-rs, run as `cargo xtask <command>`.

mod bench;
mod bench_engram;
mod bench_engram_reuse;
mod bench_openai;
mod bench_openai_http;
mod bench_openai_prompts;
mod bench_plot;
mod bench_replay;
mod check;
mod check_quality;
mod flags;
mod gate;
mod gate_model;
mod gate_stats;
mod lean_check;
mod make_tiny;
mod soak;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  bench cpu [criterion args] | bench gpu | bench engram [--size-gb G ...] | bench engram-reuse [PATH ...]
      cpu: the matmul, qgemm and fp4 benchmarks; gpu: build gpu-carry/ and run (or explain) scripts/gpu-check.sh
  bench openai [--url URL] [--prompt-tokens 2048,8192] [--concurrency 1,2,4,8] [--kinds prose,code,structured] [--out FILE] ...
      TTFT, prefill and decode tok/s with p50/p90/p99 against any OpenAI-compatible server (`bench openai --help`)
  bench plot RECEIPT [--out FILE.png]
      a `bench openai` receipt as a PNG: aggregate decode tok/s, TTFT and prefill tok/s against concurrency
  bench replay [--session FILE] [--url URL] [--concurrency 1,2,4] [--out FILE]
      a recorded multi-turn session at each concurrency: wall time, TTFT, prompt-cache hit rate (`bench replay --help`)
  check sweep|invariance|divergence|needle|nll [--url URL] [--out FILE] ...
      a prompt-length sweep; concurrent == solo and resumed == fresh bit for bit; first divergence from, and
      NLL / top-1 on the continuations of, a reference server; a needle test; any OpenAI server (`check --help`)
  gate --candidate SWITCHES [--model DIR] [--device cpu|cuda[:N]] [--prompts FILE] [--thresholds FILE]
       [--prefill-frac F] [--window N] [--max-positions N] [--out FILE] [--dump-ids FILE]
       [--rows text,greedy] [--greedy N] [--cuts F,F,..]
      the exact path and a candidate (exact, sequential-sums, sequential-wo-a, exl3-fast, exl3-prompt-gemm, prefill-mxfp4, cuda-graphs, expert-top-p)
      teacher-forced on assets/gate/prompts.json: KL, greedy agreement, top-1, NLL against assets/gate/thresholds.json;
      greedy rows follow the exact path's own N tokens at each cut (default: every row set the thresholds declare)
  gate-model install --from DIR | expand --out DIR | exl3 --out DIR [--bits K]
      install a compact gate model (tools/gate_model/compact.py) into assets/gate-model, expand the installed one,
      or write its deterministic EXL3 copy (K bits, default 3) for gating the EXL3 switches
  lean-check [--root DIR] [--update-baseline]
      check the lean rules (file length, one-line comments) against lean-baseline.txt
  make-tiny --out DIR [--config tiny|small] [--seed N]
      write a deterministic synthetic dsv41 checkpoint in the official format
  soak [--url URL] [--duration-s S] [--concurrency N] [--out FILE] ...
      a timed mix of chats, streams, long prompts, cancels, tool calls and malformed bodies against any
      OpenAI-compatible server: errors, lost requests, /health and memory over time (`soak --help`)";

/// Exit status for bad command lines, distinct from a failed check.
pub(crate) const USAGE_ERROR: u8 = 2;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(command) = args.next() else {
        return usage_error("missing command");
    };
    let rest: Vec<String> = args.collect();
    match command.as_str() {
        "bench" => bench::run(&rest),
        "check" => check::run(&rest),
        "gate" => gate::run(&rest),
        "gate-model" => gate_model::run(&rest),
        "lean-check" => lean_check::run(&rest),
        "make-tiny" => make_tiny::run(&rest),
        "soak" => soak::run(&rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => usage_error(&format!("unknown command `{other}`")),
    }
}

/// The workspace that built xtask, so nothing depends on the current directory.
pub(crate) fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = manifest_dir.parent().unwrap_or(manifest_dir);
    // A binary carried to another machine runs from a checkout's root, where the build path does not exist.
    if built.join("Cargo.toml").is_file() { built.to_owned() } else { PathBuf::from(".") }
}

pub(crate) fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: {message}\n\n{USAGE}");
    ExitCode::from(USAGE_ERROR)
}
