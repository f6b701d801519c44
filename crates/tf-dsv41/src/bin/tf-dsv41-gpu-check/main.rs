//! dsv41 GPU self-check: each dsv41 kernel against its CPU twin on fresh random inputs, then the model end to end.

mod attn;
mod dspark;
mod e2e;
mod engram;
mod graphs;
mod index;
mod index_rows;
mod lanes;
mod lengths;
mod lin;
mod mix;
mod nccl;
mod probe;
mod rows;
mod tp;
mod util;
mod verify;

use e2e::Exl3Run;
use std::process::ExitCode;
use tf_core::rng::SplitMix64;
use tf_cuda::Gpu;
use tf_cuda::report::{Report, finish, section, seed};
use tf_dsv41::tiny::TinyKind;

fn main() -> ExitCode {
    let mut report = Report::default();
    let seed = seed();
    println!("tf-dsv41-gpu-check: seed {seed} (TF_CHECK_SEED={seed} replays this run)");
    report.set("seed", seed.into());
    let ordinal = std::env::var("TF_GPU").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let world = std::env::var("TF_NCCL_WORLD").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    match Gpu::open(ordinal) {
        Err(e) => report.row("open", format!("GPU {ordinal}"), e.to_string(), false),
        Ok(_) if world > 1 => run_group(world, &mut report),
        Ok(gpu) => run(Box::leak(Box::new(gpu)), &mut SplitMix64::new(seed), &mut report),
    }
    finish(&report, "dsv41-gpu-check.json")
}

/// Each section runs even when an earlier one failed; a section's error or panic becomes a failed row naming it.
fn run(gpu: &'static Gpu, rng: &mut SplitMix64, report: &mut Report) {
    let only = tf_cuda::report::sections_named();
    let mut run_one = |name: &str, f: &mut dyn FnMut(&mut Report) -> Result<(), tf_cuda::Error>| {
        if tf_cuda::report::picked(&only, name) {
            section(report, name, |r| f(r));
        }
    };
    run_one("rows", &mut |r| rows::check(gpu, rng, r));
    run_one("linear, rope, quant", &mut |r| lin::check(gpu, rng, r));
    run_one("mhc, moe, engram", &mut |r| mix::check(gpu, rng, r));
    run_one("compress_pool", &mut |r| attn::check_pool(gpu, rng, r));
    run_one("sparse_attn", &mut |r| attn::check_sparse(gpu, rng, r));
    run_one("index_scores", &mut |r| index::check_scores(gpu, rng, r));
    run_one("index_select", &mut |r| index::check_select(gpu, rng, r));
    run_one("index rows", &mut |r| index_rows::check(gpu, rng, r));
    // End to end last: the op sections above say which kernel to blame when it fails.
    for kind in [TinyKind::Tiny, TinyKind::Small] {
        run_one(&format!("e2e {}", kind.name()), &mut |r| e2e::check(gpu, rng, r, kind));
    }
    for kind in [TinyKind::Tiny, TinyKind::Small] {
        run_one(&format!("e2e grouped {}", kind.name()), &mut |r| e2e::check_grouped(gpu, rng, r, kind, false));
    }
    for kind in [TinyKind::Tiny, TinyKind::Small] {
        run_one(&format!("e2e tiled {}", kind.name()), &mut |r| e2e::check_grouped(gpu, rng, r, kind, true));
    }
    for kind in [TinyKind::Tiny, TinyKind::Small] {
        run_one(&format!("exl3 e2e {}", kind.name()), &mut |r| e2e::check_exl3(gpu, rng, r, kind, Exl3Run::Exact));
    }
    for kind in [TinyKind::Tiny, TinyKind::Small] {
        run_one(&format!("exl3 mxfp4 e2e {}", kind.name()), &mut |r| {
            e2e::check_exl3(gpu, rng, r, kind, Exl3Run::Mxfp4)
        });
    }
    // Tier-2 switches' gates run only when named (TF_SECTIONS="exl3 fast gate"): their verdicts are measurements.
    for (gate, run) in [("exl3 fast gate", Exl3Run::FastGate), ("exl3 prompt gemm gate", Exl3Run::PromptGemmGate)] {
        if only.iter().any(|o| o == gate) {
            for kind in [TinyKind::Tiny, TinyKind::Small] {
                run_one(&format!("{gate} {}", kind.name()), &mut |r| e2e::check_exl3(gpu, rng, r, kind, run));
            }
        }
    }
    for kind in [TinyKind::Tiny, TinyKind::Small] {
        run_one(&format!("verify {}", kind.name()), &mut |r| verify::check(gpu, rng, r, kind));
    }
    for kind in [TinyKind::Tiny, TinyKind::Small] {
        run_one(&format!("dspark {}", kind.name()), &mut |r| dspark::check(gpu, rng, r, kind));
    }
    for kind in [TinyKind::Tiny, TinyKind::Small] {
        run_one(&format!("lanes {}", kind.name()), &mut |r| lanes::check(gpu, rng, r, kind));
    }
    run_one("engram read-ahead", &mut |r| engram::check(gpu, rng, r));
    run_one("probe", &mut |r| probe::check(gpu, rng, r));
    run_one("prompt lengths", &mut |r| lengths::check(gpu, rng, r));
    let ordinal = std::env::var("TF_GPU").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    run_one("nccl", &mut |r| nccl::check(ordinal, r));
    for kind in [TinyKind::Tiny, TinyKind::Small] {
        run_one(&format!("gpu tp {}", kind.name()), &mut |r| tp::check(ordinal, r, kind));
    }
}

/// One rank of scripts/gpu-tp.sh's group: only the NCCL group section runs.
fn run_group(world: usize, report: &mut Report) {
    let rank = std::env::var("TF_NCCL_RANK").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let addr = std::env::var("TF_NCCL_ADDR").unwrap_or_else(|_| "127.0.0.1:29500".into());
    section(report, "nccl group", |r| nccl::check_group(world, rank, &addr, r));
}
