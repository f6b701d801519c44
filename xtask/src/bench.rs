//! `cargo xtask bench cpu|gpu|decode|exl3|engram|engram-reuse|openai|replay|plot`: the benchmarks whose ratios docs/bench.md and docs/perf.md report.

use std::process::{Command, ExitCode};

const CPU_BENCHES: [(&str, &str); 3] = [("tf-core", "matmul"), ("tf-core", "qgemm"), ("tf-exl3", "fp4")];

/// Runs one command from the workspace root, naming it when it fails.
fn step(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let status = cmd.current_dir(crate::workspace_root()).status().map_err(|e| format!("{shown}: {e}"))?;
    status.success().then_some(()).ok_or_else(|| format!("{shown} failed: {status}"))
}

fn cpu(extra: &[String]) -> Result<(), String> {
    for (package, bench) in CPU_BENCHES {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["bench", "-p", package, "--bench", bench, "--", "--warm-up-time", "1", "--measurement-time", "3"]);
        step(cmd.args(extra))?;
    }
    Ok(())
}

/// Builds gpu-carry/; runs `script` (with `env`) here when this machine has an NVIDIA driver, else says how to run it there.
fn gpu(script: &str, env: &[(&str, &str)]) -> Result<(), String> {
    step(Command::new("bash").arg("scripts/gpu-build.sh"))?;
    let has_gpu = Command::new("nvidia-smi").arg("-L").output().is_ok_and(|o| o.status.success());
    if has_gpu {
        return step(Command::new("bash").arg(script).envs(env.iter().copied()));
    }
    let vars: String = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    println!("no GPU here: copy gpu-carry/ and scripts/ to the GPU machine and run `{vars}bash {script}` there");
    Ok(())
}

pub fn run(args: &[String]) -> ExitCode {
    let r = match args.first().map(String::as_str) {
        Some("cpu") => cpu(&args[1..]),
        Some("gpu") => gpu("scripts/gpu-check.sh", &[]),
        Some("decode") => gpu("scripts/gpu-bench.sh", &[]),
        // The EXL3 check carries the bench's rows: K = 2, 3, 4 on both expert shapes against the same run's copy rate.
        Some("exl3") => gpu("scripts/gpu-check.sh", &[("TF_CHECKS", "tf-exl3-gpu-check")]),
        Some("engram") => crate::bench_engram::run(&args[1..]),
        Some("engram-reuse") => crate::bench_engram_reuse::run(&args[1..]),
        Some("openai" | "concurrent") => return crate::bench_openai::run(&args[1..]),
        Some("replay") => return crate::bench_replay::run(&args[1..]),
        Some("plot") => return crate::bench_plot::run(&args[1..]),
        _ => {
            return crate::usage_error(
                "bench needs `cpu`, `gpu`, `decode`, `exl3`, `engram`, `engram-reuse`, `openai`, `replay` or `plot`",
            );
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
