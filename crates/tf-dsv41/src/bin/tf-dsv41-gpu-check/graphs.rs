//! Decode steps replayed as CUDA graphs give the bits of the same steps launched one by one.

use crate::e2e::{STEPS, Side, err, prefill, prompt, run};
use tf_core::rng::SplitMix64;
use tf_cuda::Error;
use tf_cuda::report::Report;
use tf_dsv41::cuda::GpuModel;

/// Rows of the multi-row decode case (a verify window's shape).
const WINDOW: usize = 3;

/// Switches `gm` to graphs (left on for the caller's next gates) and compares every solo run, and a 3-row decode, with direct launches.
pub fn check(
    gm: &mut GpuModel,
    solo: &[(Vec<u32>, Vec<Vec<f32>>)],
    rng: &mut SplitMix64,
    report: &mut Report,
    name: &str,
) -> Result<(), Error> {
    let before = gm.gpu.graph_stats();
    gm.graphs = true;
    let mut equal = 0;
    for (p, direct) in solo {
        let g = run(&mut Side(gm, gm.new_lane()?), p, STEPS).map_err(err)?;
        equal += usize::from(g == *direct);
    }
    let window = window_rows(gm, rng)?;
    let after = gm.gpu.graph_stats();
    let captured = after.captured - before.captured;
    let pass = equal == solo.len() && window && captured > 0;
    report.row(
        "e2e graphs == direct",
        name,
        format!(
            "{equal} of {} prompts × {STEPS} steps bit-identical; {WINDOW}-row decode equal {window}; {captured} steps captured, {} updated, {} instantiated",
            solo.len(),
            after.updated - before.updated,
            after.instantiated - before.instantiated
        ),
        pass,
    );
    Ok(())
}

/// Eight 3-row decode calls after one prompt, with graphs and without, give the same logits.
fn window_rows(gm: &mut GpuModel, rng: &mut SplitMix64) -> Result<bool, Error> {
    let vocab = gm.cfg().vocab_size;
    let p = prompt(rng, 20, vocab);
    let rows: Vec<Vec<u32>> = (0..8).map(|_| prompt(rng, WINDOW, vocab)).collect();
    let mut out = Vec::new();
    for graphs in [false, true] {
        gm.graphs = graphs;
        let mut side = Side(gm, gm.new_lane()?);
        let mut l = vec![prefill(&mut side, &p).map_err(err)?];
        for r in &rows {
            l.extend(gm.decode(&mut side.1, r).map_err(err)?);
        }
        out.push(l);
    }
    gm.graphs = true;
    Ok(out[0] == out[1])
}
