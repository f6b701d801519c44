//! GPU ranks in lockstep (issue 25): TP2 and TP3, experts split or experts, heads, vocabulary and Engram split, every rank on this one GPU, equal the plain GPU model bit for bit.

use crate::e2e::{argmax, err};
use crate::nccl::script;
use std::time::{Duration, Instant};
use tf_collective::InProcessComm;
use tf_cuda::Error;
use tf_cuda::report::Report;
use tf_dsv41::cuda::{GpuModel, open_gpu};
use tf_dsv41::tiny::TinyKind;
use tf_dsv41::tp::lockstep::{Leader, follow};
use tf_dsv41::{Model, Options};
use tf_family::Family;

/// A script's logits rows, then a draft after the prompt (tokens and confidences as one row).
fn rows<F: Family>(f: &F, vocab: u32) -> Result<Vec<Vec<f32>>, Error> {
    let mut rows = script(f, vocab)?;
    let mut lane = f.new_lane().map_err(err)?;
    let prompt: Vec<u32> = (0..20u32).map(|j| (j * 31 + 7) % (vocab - 4) + 4).collect();
    let last = f.prefill(&mut lane, &prompt, true).map_err(err)?.expect("the last chunk's logits");
    if let Some(d) = f.draft(&mut lane, argmax(&last), 5).map_err(err)? {
        rows.push(d.tokens.iter().map(|&t| t as f32).chain(d.confidence).collect());
    }
    rows.extend(shared_steps(f, vocab)?);
    Ok(rows)
}

/// Three lanes in shared steps (one frame a step under TP), the middle one a 3-row verify window every other step.
fn shared_steps<F: Family>(f: &F, vocab: u32) -> Result<Vec<Vec<f32>>, Error> {
    let mut lanes = Vec::new();
    let mut next = Vec::new();
    for i in 0..3u32 {
        let mut lane = f.new_lane().map_err(err)?;
        let prompt: Vec<u32> = (0..3 + 25 * i).map(|j| (j * 53 + 9 + i) % (vocab - 4) + 4).collect();
        next.push(argmax(&f.prefill(&mut lane, &prompt, true).map_err(err)?.expect("the last chunk's logits")));
        lanes.push(lane);
    }
    let mut rows = Vec::new();
    for step in 0..4 {
        let verify = [false, step % 2 == 1, false];
        let windows: Vec<Vec<u32>> =
            (0..3).map(|i| if verify[i] { vec![next[i], (next[i] + 1) % vocab, 5] } else { vec![next[i]] }).collect();
        let w: Vec<&[u32]> = windows.iter().map(Vec::as_slice).collect();
        let mut pfs: Vec<Option<F::Prefetch>> = (0..3).map(|_| None).collect();
        let out = f.step_lanes(&mut lanes.iter_mut().collect::<Vec<_>>(), &w, &verify, &mut pfs);
        for (i, r) in out.into_iter().enumerate() {
            let mut r = r.map_err(err)?;
            if verify[i] {
                f.rewind(&mut lanes[i], 1).map_err(err)?;
                r.truncate(1);
            }
            next[i] = argmax(&r[0]);
            rows.extend(r);
        }
    }
    Ok(rows)
}

fn split(heads: bool) -> &'static str {
    if heads { "experts, heads, vocabulary and Engram split" } else { "experts split" }
}

pub fn check(ordinal: usize, report: &mut Report, kind: TinyKind) -> Result<(), Error> {
    let dir = crate::e2e::TempModel::write(&format!("gpu-tp-{}", kind.name()), kind)?;
    let plain = GpuModel::load(&dir, Options::default(), open_gpu(ordinal)?).map_err(err)?;
    let vocab = plain.cfg.vocab_size as u32;
    rows(&plain, vocab)?;
    let t = Instant::now();
    let want = rows(&plain, vocab)?;
    let plain_ms = t.elapsed().as_secs_f64() * 1e3;
    let cpu = rows(&Model::load(&dir, Options::default()).map_err(err)?, vocab)?;
    report.row("gpu tp", format!("{}: plain GPU == CPU", kind.name()), format!("{} rows", cpu.len()), cpu == want);
    for (world, split_heads) in [(2, false), (3, false), (2, true), (3, true)] {
        let opts = Options { split_heads, ..Options::default() };
        let mut ranks = Vec::new();
        for comm in InProcessComm::group_with_timeout(world, Duration::from_secs(60)) {
            let (model, comm) = tf_dsv41::tp::load_rank(&dir, opts, Box::new(comm)).map_err(err)?;
            ranks.push((GpuModel::from_cpu(model, open_gpu(ordinal)?)?, comm));
        }
        let (leader_model, leader_comm) = ranks.remove(0);
        let followers: Vec<_> = ranks.into_iter().map(|(m, c)| std::thread::spawn(move || follow(&m, &c))).collect();
        let leader = Leader::new(leader_model, leader_comm);
        rows(&leader, vocab)?;
        let t = Instant::now();
        let got = rows(&leader, vocab)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        drop(leader);
        let ends: Vec<bool> = followers.into_iter().map(|f| matches!(f.join(), Ok(Ok(())))).collect();
        let same = got == want;
        report.row(
            "gpu tp",
            format!("{} TP{world} on one GPU ({}, host-staged gathers) == plain GPU", kind.name(), split(split_heads)),
            format!("{} rows in {ms:.1} ms (plain {plain_ms:.1} ms); followers stopped cleanly: {ends:?}", got.len()),
            same && ends.iter().all(|&e| e),
        );
    }
    Ok(())
}
