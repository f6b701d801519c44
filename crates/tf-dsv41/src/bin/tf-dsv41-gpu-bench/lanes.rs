//! Lanes decoded in one step (issue 24 item 2) against the same lanes one after another, on forks of the context lane.

use super::count::step_bytes;
use super::{STEPS, fail, tokens};
use serde_json::{Value, json};
use std::time::Instant;
use tf_core::rng::SplitMix64;
use tf_cuda::timing::median;
use tf_dsv41::cuda::{GpuLane, GpuModel};

/// `n` lanes at the context length: the median shared step, the median of `n` single-lane steps, and the shared step's floor.
pub fn lanes_bench(
    model: &GpuModel,
    base: &GpuLane,
    counts: &[usize],
    (ctx, gbps): (usize, f64),
    rng: &mut SplitMix64,
) -> Result<Value, String> {
    let vocab = model.cfg().vocab_size;
    let mut out = Vec::new();
    for &n in counts {
        let mut lanes = (0..n).map(|_| base.fork(model.gpu)).collect::<Result<Vec<_>, _>>().map_err(fail)?;
        let shared = |rng: &mut SplitMix64, lanes: &mut [GpuLane]| {
            let toks = tokens(rng, n, vocab);
            let rows: Vec<&[u32]> = toks.iter().map(std::slice::from_ref).collect();
            model.decode_lanes(&mut lanes.iter_mut().collect::<Vec<_>>(), &rows).map(drop).map_err(fail)
        };
        *model.route_log.lock() = Some(Vec::new());
        shared(rng, &mut lanes)?;
        let routes = model.route_log.lock().take().unwrap_or_default();
        let bytes = step_bytes(model, &routes, n, ctx);
        shared(rng, &mut lanes)?;
        let (mut together, mut apart) = (Vec::with_capacity(STEPS), Vec::with_capacity(STEPS));
        for _ in 0..STEPS {
            let t = Instant::now();
            shared(rng, &mut lanes)?;
            together.push(t.elapsed().as_secs_f32() * 1e3);
            let t = Instant::now();
            for lane in &mut lanes {
                model.decode(lane, &tokens(rng, 1, vocab)).map_err(fail)?;
            }
            apart.push(t.elapsed().as_secs_f32() * 1e3);
        }
        let (step_ms, apart_ms) = (f64::from(median(&together)), f64::from(median(&apart)));
        let floor_ms = (bytes.weights + n * bytes.kv) as f64 / (gbps * 1e9) * 1e3;
        println!(
            "[bench] decode {n:2} lanes in one step: {step_ms:8.2} ms/step ({:.3} ms/token); one after another {apart_ms:8.2} ms; {:.2}× faster; floor {floor_ms:.3} ms, ratio {:.2}× floor",
            step_ms / n as f64,
            apart_ms / step_ms,
            step_ms / floor_ms
        );
        out.push(
            json!({"lanes": n, "step_ms": step_ms, "one_after_another_ms": apart_ms, "speedup": apart_ms / step_ms,
                        "floor_ms": floor_ms, "ratio_to_floor": step_ms / floor_ms, "samples_ms": together}),
        );
    }
    Ok(Value::Array(out))
}
