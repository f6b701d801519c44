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

/// Each section runs even when an earlier one failed; a section's error or panic becomes a failed row naming it.
fn run(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) {
    section(report, "device", |r| device::describe(gpu, r));
    let mut copy_gbps = f64::NAN;
    section(report, "copy bandwidth", |r| device::copy_bandwidth(gpu, r).map(|bw| copy_gbps = bw));
    section(report, "rmsnorm_bf16", |r| norm::check(gpu, rng, r, copy_gbps));
    section(report, "fp8_gemv", |r| fp8::check(gpu, rng, r, copy_gbps));
}

/// Runs one section, timing it, and records its error or panic as a failed row.
fn section(report: &mut Report, name: &str, f: impl FnOnce(&mut Report) -> Result<(), tf_cuda::Error>) {
    let t = std::time::Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(report)));
    let failure = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => Some(format!(
            "panicked: {}",
            panic.downcast_ref::<String>().map(String::as_str).or(panic.downcast_ref::<&str>().copied()).unwrap_or("?")
        )),
    };
    if let Some(what) = failure {
        report.row(name, "section", what, false);
    }
    println!("{name} section took {:.1} s", t.elapsed().as_secs_f32());
}
