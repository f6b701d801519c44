//! The many-lengths gate: a thousand prompt lengths from 1 to 20,000 tokens on the tiny model, none failing.

use crate::e2e::{LOGIT_TOL, Side, argmax, err, logit_diff, near_tie, prompt};
use serde_json::json;
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu};
use tf_dsv41::cuda::{GpuLane, GpuModel};
use tf_dsv41::tiny::TinyKind;
use tf_dsv41::{Model, Options};

/// The gate: at least a thousand lengths, up to 20,000 tokens.
const COUNT: usize = 1000;
const LONGEST: usize = 20_000;
/// Every length up to here (window, compressor groups, candidate blocks), then log-uniform above.
const DENSE_UP_TO: usize = 200;
/// Prefill chunk; a length's earlier chunks come from a fork of the shared prefix, so only its last chunk runs anew.
const CHUNK: usize = 512;
/// Lengths also compared with the CPU: edges of the window, of a chunk and the longest.
const CPU_AT: [usize; 7] = [1, 127, 129, 511, 513, 5000, LONGEST];

/// Every length 1..=DENSE_UP_TO, then distinct log-uniform lengths up to LONGEST (LONGEST included).
fn lengths(rng: &mut SplitMix64) -> Vec<usize> {
    let mut set: std::collections::BTreeSet<usize> = (1..=DENSE_UP_TO).chain(CPU_AT).collect();
    let (lo, hi) = ((DENSE_UP_TO as f64).ln(), (LONGEST as f64).ln());
    while set.len() < COUNT {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        set.insert(((lo + u * (hi - lo)).exp().round() as usize).clamp(DENSE_UP_TO + 1, LONGEST));
    }
    set.into_iter().collect()
}

/// Prefill `p` in chunks, then one greedy decode step; both logits.
fn run<B: tf_dsv41::plan::Backend>(side: &mut Side<'_, B>, p: &[u32]) -> Result<[Vec<f32>; 2], String> {
    let mut last = None;
    for (i, c) in p.chunks(CHUNK).enumerate() {
        last = side.prefill(c, (i + 1) * CHUNK >= p.len())?;
    }
    let last = last.ok_or("the last chunk returned no logits")?;
    let next = side.decode(argmax(&last))?;
    Ok([last, next])
}

/// The last chunk of `p` on a fork of the lane that holds its earlier chunks, then one greedy decode step.
fn run_tail(gm: &GpuModel, snaps: &[GpuLane], p: &[u32]) -> Result<[Vec<f32>; 2], String> {
    let k = (p.len() - 1) / CHUNK;
    let lane = snaps[k].fork(gm.gpu).map_err(|e| e.to_string())?;
    let mut side = Side(gm, lane);
    let last = side.prefill(&p[k * CHUNK..], true)?.ok_or("the last chunk returned no logits")?;
    let next = side.decode(argmax(&last))?;
    Ok([last, next])
}

pub fn check(gpu: &'static Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let dir = crate::e2e::TempModel::write("lengths", TinyKind::Tiny)?;
    gate(gpu, rng, report, &dir)
}

fn gate(gpu: &'static Gpu, rng: &mut SplitMix64, report: &mut Report, dir: &std::path::Path) -> Result<(), Error> {
    let opts = Options::default();
    let gm = GpuModel::load(dir, opts, gpu).map_err(err)?;
    let cpu = Model::load(dir, opts).map_err(err)?;
    let base = prompt(rng, LONGEST, gm.cfg().vocab_size);
    let lens = lengths(rng);
    // The CPU's side of the comparisons runs on other cores while the GPU works through the lengths.
    std::thread::scope(|scope| {
        let cpu_side = scope.spawn(|| CPU_AT.map(|n| run(&mut Side(&cpu, cpu.new_state()), &base[..n])));
        let (mut failed, tokens, gpu_out) = gpu_lengths(gpu, &gm, &base, &lens)?;
        let (mut worst, mut compared, mut exact) = (0.0f64, Vec::new(), 0);
        let cpu_out = cpu_side.join().map_err(|_| err("the CPU side panicked"))?;
        for (n, c) in CPU_AT.iter().zip(cpu_out) {
            let (Some(g), c) = (gpu_out.get(n), c.map_err(err)?) else { continue };
            // The decode step compares only when both picked the same token; a different pick must be a near-tie.
            let same = argmax(&g[0]) == argmax(&c[0]);
            let d = logit_diff(&g[0], &c[0]).max(if same { logit_diff(&g[1], &c[1]) } else { 0.0 });
            worst = worst.max(d);
            compared.push(*n);
            exact += usize::from(*g == c);
            if d > LOGIT_TOL || !(same || near_tie(&g[0], &c[0])) {
                failed.push(format!("{n}: max |Δlogit| {d:.3} vs the CPU, same pick {same}"));
            }
        }
        let what = format!(
            "{} lengths 1..={LONGEST} (chunks of {CHUNK}, replay on; earlier chunks forked from one shared prefill) + 1 decode step; CPU compared at {compared:?}",
            lens.len()
        );
        let result = format!(
            "{} failed{}; worst |Δlogit| vs CPU {worst:.3}, {exact} of {} bit-identical; {tokens} GPU tokens",
            failed.len(),
            failed.first().map(|f| format!(", first {f}")).unwrap_or_default(),
            compared.len()
        );
        report.row("prompt lengths", what, result, failed.is_empty() && lens.len() >= COUNT);
        report.push("lengths", json!({"count": lens.len(), "failed": failed, "worst_cpu": worst, "bit_identical": exact, "tokens": tokens}));
        Ok(())
    })
}

/// Every length on the GPU: failures, tokens run, and the logits of the lengths the CPU also runs.
#[allow(clippy::type_complexity)]
fn gpu_lengths(
    gpu: &'static Gpu,
    gm: &GpuModel,
    base: &[u32],
    lens: &[usize],
) -> Result<(Vec<String>, usize, std::collections::HashMap<usize, [Vec<f32>; 2]>), Error> {
    let (mut failed, mut tokens, mut keep) = (Vec::new(), 0usize, std::collections::HashMap::new());
    let t = std::time::Instant::now();
    // snaps[k]: a lane that has prefilled the first k chunks of the shared prompt (not last: replay stays buffered).
    let mut snaps = vec![gm.new_lane()?];
    let mut lane = gm.new_lane()?;
    for c in base[..LONGEST - 1].chunks_exact(CHUNK) {
        gm.prefill(&mut lane, c, false).map_err(err)?;
        snaps.push(lane.fork(gpu)?);
        tokens += CHUNK;
    }
    for (i, &n) in lens.iter().enumerate() {
        if i % 100 == 0 {
            println!("prompt lengths: {i} of {} done, {:.1} s", lens.len(), t.elapsed().as_secs_f64());
        }
        tokens += n - (n - 1) / CHUNK * CHUNK + 1;
        match run_tail(gm, &snaps, &base[..n]) {
            Ok(g) if g.iter().flatten().all(|v| v.is_finite()) => {
                if CPU_AT.contains(&n) {
                    keep.insert(n, g);
                }
            }
            Ok(_) => failed.push(format!("{n}: non-finite logits")),
            Err(e) => failed.push(format!("{n}: {e}")),
        }
    }
    println!("prompt lengths: GPU side {:.1} s", t.elapsed().as_secs_f64());
    Ok((failed, tokens, keep))
}
