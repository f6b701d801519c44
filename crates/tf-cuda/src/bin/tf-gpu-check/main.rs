//! GPU self-check: device facts, copy bandwidth, and each kernel against the CPU reference; exits nonzero on any failure.

mod device;
mod fp8;
mod norm;
mod report;

use report::Report;
use std::path::PathBuf;
use std::process::ExitCode;
use tf_core::rng::SplitMix64;
use tf_cuda::Gpu;

/// `TF_CHECK_SEED`, else the clock: fresh data each run, printed so a failure can be replayed.
fn seed() -> u64 {
    std::env::var("TF_CHECK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    })
}

fn main() -> ExitCode {
    let mut report = Report::default();
    let seed = seed();
    println!("tf-gpu-check: seed {seed} (TF_CHECK_SEED={seed} replays this run)");
    report.set("seed", seed.into());
    let ordinal = std::env::var("TF_GPU").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    match Gpu::open(ordinal) {
        Err(e) => report.row("open", format!("GPU {ordinal}"), e.to_string(), false),
        Ok(gpu) => run(&gpu, &mut SplitMix64::new(seed), &mut report),
    }
    report.print_table();
    if let Some(out) = std::env::var_os("OUT") {
        let path = PathBuf::from(out).join("gpu-check.json");
        match report.write_json(&path) {
            Ok(()) => println!("wrote {}", path.display()),
            Err(e) => {
                println!("FAIL writing {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Each section runs even when an earlier one failed; a section's error becomes a failed row naming it.
fn run(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) {
    if let Err(e) = device::describe(gpu, report) {
        report.row("device", "info", e.to_string(), false);
    }
    let copy_gbps = device::copy_bandwidth(gpu, report).unwrap_or_else(|e| {
        report.row("copy bandwidth", "4 GiB d2d", e.to_string(), false);
        f64::NAN
    });
    let t = std::time::Instant::now();
    if let Err(e) = norm::check(gpu, rng, report, copy_gbps) {
        report.row("rmsnorm_bf16", "section", e.to_string(), false);
    }
    println!("rmsnorm section took {:.1} s (first use compiles the kernel)", t.elapsed().as_secs_f32());
    let t = std::time::Instant::now();
    if let Err(e) = fp8::check(gpu, rng, report, copy_gbps) {
        report.row("fp8_gemv", "section", e.to_string(), false);
    }
    println!("fp8 section took {:.1} s", t.elapsed().as_secs_f32());
}
