//! Drafting on the flash-shaped layers (issue 26): a DSpark block's cost, each verify window with its rewind, and tokens per second for given acceptance.

use super::{STEPS, fail, tokens};
use serde_json::{Value, json};
use std::time::Instant;
use tf_core::rng::SplitMix64;
use tf_cuda::timing::median;
use tf_dsv41::cuda::{GpuLane, GpuModel};

/// Mean accepted lengths (tokens a verify window yields, the bonus one included) scored by default: the gate model's recorded 1 + 0.625, the 3.5 vLLM and SGLang report for DSpark, and every draft of 5 accepted.
const LENGTHS: [f64; 3] = [1.625, 3.5, 6.0];

fn timed(n: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f()?;
        ms.push(t.elapsed().as_secs_f32() * 1e3);
    }
    Ok(f64::from(median(&ms)))
}

/// Lanes drafted at once by `lanes_draft`.
const DRAFT_LANES: usize = 4;

/// `DRAFT_LANES` forks of `lane` drafting in one `draft_lanes` call and one after another: (together ms, apart ms), medians of STEPS.
fn lanes_draft(model: &GpuModel, lane: &GpuLane, next: u32) -> Result<(f64, f64), String> {
    let mut lanes: Vec<GpuLane> =
        (0..DRAFT_LANES).map(|_| lane.fork(model.gpu).map_err(fail)).collect::<Result<_, _>>()?;
    let nexts = vec![next; DRAFT_LANES];
    let together =
        timed(STEPS, || model.draft_lanes(&mut lanes.iter_mut().collect::<Vec<_>>(), &nexts).map(drop).map_err(fail))?;
    let apart = timed(STEPS, || lanes.iter_mut().try_for_each(|l| model.draft(l, next).map(drop).map_err(fail)))?;
    println!(
        "[bench] drafting: {DRAFT_LANES} lanes' DSpark blocks together {together:.2} ms, one after another {apart:.2} ms"
    );
    Ok((together, apart))
}

/// Plain decode, a draft, and verify windows of `k + 1` rows for k = 1..5 (each rewound to one row, the most undone), medians of STEPS.
pub fn draft_bench(model: &GpuModel, base: &GpuLane, rng: &mut SplitMix64) -> Result<Value, String> {
    let vocab = model.cfg().vocab_size;
    let mut lane = base.fork(model.gpu).map_err(fail)?;
    for _ in 0..2 {
        model.decode(&mut lane, &tokens(rng, 1, vocab)).map_err(fail)?;
    }
    let plain = timed(STEPS, || model.decode(&mut lane, &tokens(rng, 1, vocab)).map(drop).map_err(fail))?;
    let next = tokens(rng, 1, vocab)[0];
    let draft = timed(STEPS, || model.draft(&mut lane, next).map(drop).map_err(fail))?;
    let (together, apart) = lanes_draft(model, &lane, next)?;
    let mut windows = Vec::new();
    for k in 1..=5 {
        let run = |lane: &mut GpuLane, rng: &mut SplitMix64| -> Result<(), String> {
            model.verify(lane, &tokens(rng, k + 1, vocab)).map_err(fail)?;
            model.rewind(lane, 1).map_err(fail)
        };
        run(&mut lane, rng)?;
        let ms = timed(STEPS, || run(&mut lane, rng))?;
        println!("[bench] drafting: verify window of {} rows + rewind to 1: {ms:.2} ms", k + 1);
        windows.push(ms);
    }
    let step5 = draft + windows[4];
    println!(
        "[bench] drafting: plain decode {plain:.2} ms/token; one DSpark block of 5 drafts {draft:.2} ms; a k = 5 step {step5:.2} ms breaks even at {:.2} tokens a window",
        step5 / plain
    );
    let lengths: Vec<f64> = match std::env::var("TF_BENCH_DRAFT_LENGTHS") {
        Ok(list) => list.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => LENGTHS.to_vec(),
    };
    let mut rows = Vec::new();
    for len in lengths {
        // With k fixed at 5 every window costs the same, so the time per token is that cost over the mean accepted length.
        let per_token = step5 / len;
        println!(
            "[bench] drafting at mean accepted length {len:.3} (k = 5): {per_token:.2} ms/token, {:.2}× plain decode",
            plain / per_token
        );
        rows.push(json!({"mean_accepted_length": len, "ms_per_token": per_token, "speedup": plain / per_token}));
    }
    Ok(
        json!({"plain_ms": plain, "draft_ms": draft, "lanes": DRAFT_LANES, "lanes_together_ms": together, "lanes_apart_ms": apart,
              "verify_rewind_ms": windows, "break_even_length": step5 / plain,
              "at_lengths": rows}),
    )
}
