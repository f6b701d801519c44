//! Several lanes in one GPU step (issue 24 item 2): each lane's rows equal its decode alone on the GPU and on the CPU.

use crate::e2e::{argmax, err, prompt};
use crate::verify::Rows;
use std::time::Instant;
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu};
use tf_dsv41::cuda::GpuModel;
use tf_dsv41::plan::{self, Backend};
use tf_dsv41::tiny::TinyKind;
use tf_dsv41::{Model, Options};

const STEPS: usize = 24;
/// Prompt lengths of the lanes (odd and even, inside and past the window), and how many steps each stays in the batch.
const LANES: [(usize, usize); 6] = [(1, 24), (8, 10), (37, 24), (150, 17), (20, 3), (64, 24)];

/// Each lane alone on `b`: its prompt's last row, then greedy decode rows.
fn alone<B: Backend>(b: &B, lane: &mut B::Lane, p: &[u32], steps: usize) -> Result<Rows, Error> {
    let mut rows = vec![plan::prefill(b, lane, p, true, &[]).map_err(err)?.expect("last chunk")];
    for _ in 0..steps {
        let t = argmax(rows.last().unwrap());
        rows.push(plan::decode(b, lane, &[t], &[]).map_err(err)?.remove(0));
    }
    Ok(rows)
}

/// Every lane prefilled alone, then decoded in shared steps while it lasts; rows per lane and the mean shared-step time.
fn together<B: Backend>(b: &B, mut lanes: Vec<B::Lane>, prompts: &[Vec<u32>]) -> Result<(Vec<Rows>, f64), Error> {
    let mut rows: Vec<Rows> = Vec::new();
    for (lane, p) in lanes.iter_mut().zip(prompts) {
        rows.push(vec![plan::prefill(b, lane, p, true, &[]).map_err(err)?.expect("last chunk")]);
    }
    let (mut ms, mut n) = (0.0, 0);
    for step in 0..STEPS {
        let live: Vec<usize> = (0..LANES.len()).filter(|&i| step < LANES[i].1).collect();
        let toks: Vec<[u32; 1]> = live.iter().map(|&i| [argmax(rows[i].last().unwrap())]).collect();
        let toks: Vec<&[u32]> = toks.iter().map(|t| &t[..]).collect();
        let mut sel: Vec<&mut B::Lane> =
            lanes.iter_mut().enumerate().filter(|(i, _)| live.contains(i)).map(|(_, l)| l).collect();
        let t = Instant::now();
        let out = plan::decode_lanes(b, &mut sel, &toks, &[]).map_err(err)?;
        (ms, n) = (ms + t.elapsed().as_secs_f64() * 1e3, n + 1);
        for (&i, mut r) in live.iter().zip(out) {
            rows[i].push(r.remove(0));
        }
    }
    Ok((rows, ms / f64::from(n)))
}

/// On `kind`: lanes in shared GPU steps == each lane alone on the GPU == each lane alone on the CPU; then one shared verify step.
pub fn check(gpu: &'static Gpu, rng: &mut SplitMix64, report: &mut Report, kind: TinyKind) -> Result<(), Error> {
    let dir = crate::e2e::TempModel::write(&format!("lanes-{}", kind.name()), kind)?;
    // Each lane's own launches, then one launch over all lanes (`joint_lanes`): both must give every lane its bits alone.
    for (replay, joint_lanes) in [(true, false), (false, false), (true, true), (false, true)] {
        let opts = Options { replay, joint_lanes, ..Options::default() };
        let gm = GpuModel::load(&dir, opts, gpu).map_err(err)?;
        let cpu = Model::load(&dir, opts).map_err(err)?;
        let vocab = gm.cfg().vocab_size;
        let prompts: Vec<Vec<u32>> = LANES.iter().map(|&(len, _)| prompt(rng, len, vocab)).collect();
        let lanes = (0..LANES.len()).map(|_| gm.new_lane()).collect::<Result<Vec<_>, _>>()?;
        let (got, ms) = together(&gm, lanes, &prompts)?;
        let (mut same, mut cpu_same, mut total) = (0, 0, 0);
        for ((p, &(_, steps)), g) in prompts.iter().zip(&LANES).zip(&got) {
            let want = alone(&gm, &mut gm.new_lane()?, p, steps)?;
            let cpu_want = alone(&cpu, &mut cpu.new_state(), p, steps)?;
            total += want.len();
            same += g.iter().zip(&want).filter(|(g, w)| g == w).count();
            cpu_same += g.iter().zip(&cpu_want).filter(|(g, w)| g == w).count();
        }
        report.row(
            "lanes in one step == alone",
            format!("{} replay {replay}, joint {joint_lanes}, {} lanes", kind.name(), LANES.len()),
            format!("{same} of {total} rows equal the GPU alone, {cpu_same} the CPU alone; shared step {ms:.2} ms"),
            same == total && cpu_same == total,
        );
    }
    for joint_lanes in [false, true] {
        let gm = GpuModel::load(&dir, Options { joint_lanes, ..Options::default() }, gpu).map_err(err)?;
        verify_lanes(&gm, rng, report, &format!("{} joint {joint_lanes}", kind.name()))?;
    }
    Ok(())
}

/// Verify windows of three lanes in one step == each alone, then a rewind and a decode.
fn verify_lanes(gm: &GpuModel, rng: &mut SplitMix64, report: &mut Report, name: &str) -> Result<(), Error> {
    let vocab = gm.cfg().vocab_size;
    let prompts: Vec<Vec<u32>> = [17, 4, 52].iter().map(|&l| prompt(rng, l, vocab)).collect();
    let windows: Vec<Vec<u32>> = [4, 1, 3].iter().map(|&k| prompt(rng, k, vocab)).collect();
    let mut lanes = Vec::new();
    for p in &prompts {
        let mut l = gm.new_lane()?;
        plan::prefill(gm, &mut l, p, true, &[]).map_err(err)?;
        lanes.push(l);
    }
    let refs: Vec<&[u32]> = windows.iter().map(Vec::as_slice).collect();
    let got = plan::verify_lanes(gm, &mut lanes.iter_mut().collect::<Vec<_>>(), &refs, &[]).map_err(err)?;
    let mut ok = 0;
    for (i, p) in prompts.iter().enumerate() {
        let mut l = gm.new_lane()?;
        plan::prefill(gm, &mut l, p, true, &[]).map_err(err)?;
        ok += usize::from(plan::verify(gm, &mut l, &windows[i], &[]).map_err(err)? == got[i]);
        plan::rewind(gm, &mut lanes[i], 1).map_err(err)?;
        plan::rewind(gm, &mut l, 1).map_err(err)?;
        let t = [argmax(&got[i][0])];
        ok += usize::from(
            plan::decode(gm, &mut lanes[i], &t, &[]).map_err(err)? == plan::decode(gm, &mut l, &t, &[]).map_err(err)?,
        );
    }
    let what = format!("{ok} of 6: windows of 4, 1 and 3 rows, then a rewind to 1 row and a decode");
    report.row("lanes verify in one step == alone", name.to_string(), what, ok == 6);
    Ok(())
}
