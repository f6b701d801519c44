//! DSpark on the GPU against the CPU: the same drafts and confidences bit for bit, and real drafts through verify windows == plain.

use crate::e2e::{argmax, err, prompt};
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu};
use tf_dsv41::cuda::GpuModel;
use tf_dsv41::model::Drafts;
use tf_dsv41::tiny::TinyKind;
use tf_dsv41::{Model, Options};

const STEPS: usize = 12;
const LENGTHS: [usize; 4] = [1, 9, 40, 150];

/// Drafts after each of `STEPS` greedy steps on both backends: (steps whose drafts and confidences are bit-identical, steps).
fn drafts_match(gm: &GpuModel, cpu: &Model, p: &[u32]) -> Result<(usize, usize), Error> {
    let (mut gl, mut st) = (gm.new_lane()?, cpu.new_state());
    let mut row = gm.prefill(&mut gl, p, true).map_err(err)?.expect("last chunk");
    cpu.prefill(&mut st, p, true).map_err(err)?;
    let mut same = 0;
    for _ in 0..STEPS {
        let t = argmax(&row);
        let (g, c) = (gm.draft(&mut gl, t).map_err(err)?, cpu.draft(&mut st, t).map_err(err)?);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        same += usize::from(g.tokens == c.tokens && bits(&g.confidence) == bits(&c.confidence));
        row = gm.decode(&mut gl, &[t]).map_err(err)?.remove(0);
        cpu.decode(&mut st, &[t]).map_err(err)?;
    }
    Ok((same, STEPS))
}

/// Every prompt's lane for `STEPS` greedy steps, drafting all together and each alone: (steps where every lane's drafts and confidences are bit-identical, steps).
fn lanes_match(gm: &GpuModel, prompts: &[Vec<u32>]) -> Result<(usize, usize), Error> {
    let (mut lanes, mut rows) = (Vec::new(), Vec::new());
    for p in prompts {
        let mut lane = gm.new_lane()?;
        rows.push(gm.prefill(&mut lane, p, true).map_err(err)?.expect("last chunk"));
        lanes.push(lane);
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut same = 0;
    for _ in 0..STEPS {
        let next: Vec<u32> = rows.iter().map(|r| argmax(r)).collect();
        let mut alone = Vec::with_capacity(lanes.len());
        for (lane, &t) in lanes.iter_mut().zip(&next) {
            alone.push(gm.draft(lane, t).map_err(err)?);
        }
        let together = gm.draft_lanes(&mut lanes.iter_mut().collect::<Vec<_>>(), &next).map_err(err)?;
        let equal = |(a, b): (&Drafts, &Drafts)| a.tokens == b.tokens && bits(&a.confidence) == bits(&b.confidence);
        same += usize::from(together.len() == alone.len() && alone.iter().zip(&together).all(equal));
        for ((lane, row), &t) in lanes.iter_mut().zip(rows.iter_mut()).zip(&next) {
            *row = gm.decode(lane, &[t]).map_err(err)?.remove(0);
        }
    }
    Ok((same, STEPS))
}

/// Greedy decode on the GPU with its own drafts in windows of 3 (sample and match, then rewind) against plain decode: equal rows, and drafts kept.
fn drafted_equals_plain(gm: &GpuModel, p: &[u32]) -> Result<(bool, usize), Error> {
    let mut lane = gm.new_lane()?;
    let mut want = vec![gm.prefill(&mut lane, p, true).map_err(err)?.expect("last chunk")];
    while want.len() <= 3 * STEPS {
        let t = argmax(want.last().unwrap());
        want.push(gm.decode(&mut lane, &[t]).map_err(err)?.remove(0));
    }
    let mut lane = gm.new_lane()?;
    let mut got = vec![gm.prefill(&mut lane, p, true).map_err(err)?.expect("last chunk")];
    let mut kept = 0;
    while got.len() <= 3 * STEPS {
        let t = argmax(got.last().unwrap());
        let d = gm.draft(&mut lane, t).map_err(err)?;
        let window: Vec<u32> = std::iter::once(t).chain(d.tokens.into_iter().take(2)).collect();
        // Every kept row but the last confirmed a draft.
        kept += crate::verify::greedy_window(gm, &mut lane, &window, &mut got)? - 1;
    }
    got.truncate(want.len());
    Ok((got == want, kept))
}

pub fn check(gpu: &'static Gpu, rng: &mut SplitMix64, report: &mut Report, kind: TinyKind) -> Result<(), Error> {
    let dir = crate::e2e::TempModel::write(&format!("dspark-{}", kind.name()), kind)?;
    for replay in [true, false] {
        let opts = Options { replay, ..Options::default() };
        let (gm, cpu) = (GpuModel::load(&dir, opts, gpu).map_err(err)?, Model::load(&dir, opts).map_err(err)?);
        let prompts: Vec<Vec<u32>> = LENGTHS.iter().map(|&len| prompt(rng, len, gm.cfg().vocab_size)).collect();
        let (same, steps) = lanes_match(&gm, &prompts)?;
        report.row(
            "dspark lanes together == alone",
            format!("{} replay {replay} prompts {LENGTHS:?}", kind.name()),
            format!("{same} of {steps} steps with every lane's drafts bit-identical"),
            same == steps,
        );
        for len in LENGTHS {
            let p = prompt(rng, len, gm.cfg().vocab_size);
            let (same, steps) = drafts_match(&gm, &cpu, &p)?;
            let (equal, kept) = drafted_equals_plain(&gm, &p)?;
            report.row(
                "dspark GPU == CPU",
                format!("{} replay {replay} prompt {len}", kind.name()),
                format!("{same} of {steps} drafts bit-identical; drafted == plain {equal} with {kept} drafts kept"),
                same == steps && equal,
            );
        }
    }
    Ok(())
}
