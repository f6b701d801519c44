//! GPU self-check: device facts, copy bandwidth, and each kernel against the CPU reference; exits nonzero on any failure.

mod blas;
mod device;
mod fp8;
mod gemm;
mod norm;

use std::process::ExitCode;
use tf_core::rng::SplitMix64;
use tf_cuda::Gpu;
use tf_cuda::report::{Report, finish, section, seed};

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
    finish(&report, "gpu-check.json")
}

/// Each section runs even when an earlier one failed; a section's error or panic becomes a failed row naming it.
fn run(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) {
    let only = tf_cuda::report::sections_named();
    let picked = |name: &str| tf_cuda::report::picked(&only, name);
    let mut copy_gbps = f64::NAN;
    if picked("device") {
        section(report, "device", |r| device::describe(gpu, r));
    }
    if picked("copy bandwidth") {
        section(report, "copy bandwidth", |r| device::copy_bandwidth(gpu, r).map(|bw| copy_gbps = bw));
    }
    if picked("rmsnorm_bf16") {
        section(report, "rmsnorm_bf16", |r| norm::check(gpu, rng, r, copy_gbps));
    }
    if picked("fp8_gemv") {
        section(report, "fp8_gemv", |r| fp8::check(gpu, rng, r, copy_gbps));
    }
    if picked("fp8_gemm") {
        section(report, "fp8_gemm", |r| gemm::check(gpu, rng, r, copy_gbps));
    }
    if picked("cublasLt") {
        section(report, "cublasLt", |r| blas::check(gpu, rng, r));
    }
}
