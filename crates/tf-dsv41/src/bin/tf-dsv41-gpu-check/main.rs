//! dsv41 GPU self-check: each dsv41 kernel against its CPU twin on fresh random inputs, then the model end to end.

mod rows;
mod util;

use std::process::ExitCode;
use tf_core::rng::SplitMix64;
use tf_cuda::Gpu;
use tf_cuda::report::{Report, finish, section, seed};

fn main() -> ExitCode {
    let mut report = Report::default();
    let seed = seed();
    println!("tf-dsv41-gpu-check: seed {seed} (TF_CHECK_SEED={seed} replays this run)");
    report.set("seed", seed.into());
    let ordinal = std::env::var("TF_GPU").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    match Gpu::open(ordinal) {
        Err(e) => report.row("open", format!("GPU {ordinal}"), e.to_string(), false),
        Ok(gpu) => run(&gpu, &mut SplitMix64::new(seed), &mut report),
    }
    finish(&report, "dsv41-gpu-check.json")
}

/// Each section runs even when an earlier one failed; a section's error or panic becomes a failed row naming it.
fn run(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) {
    section(report, "rows", |r| rows::check(gpu, rng, r));
}
