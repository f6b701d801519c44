//! Engram on the GPU from disk through the read-ahead (prompt chunks and decode rows): the same logits as the mapped tables, bit for bit.

use crate::e2e::{argmax, err, prompt};
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu};
use tf_dsv41::Options;
use tf_dsv41::cuda::GpuModel;
use tf_dsv41::tiny::{TinyKind, write_checkpoint};
use tf_engram::IoMode;

/// Prefills in chunks of `chunk` (through the read-ahead when `ahead`), then three greedy decode steps; every logits row.
fn run(gm: &GpuModel, p: &[u32], chunk: usize, ahead: bool) -> Result<Vec<Vec<f32>>, Error> {
    let mut lane = gm.new_lane()?;
    let lens: Vec<usize> = p.chunks(chunk).map(<[u32]>::len).collect();
    // The GPU model's read-ahead runs over its host tables and hasher on the lane's history, as the server starts it.
    let mut pf = if ahead { gm.prefetch_after(lane.engram.as_ref(), p, &lens, (2, 4)).map_err(err)? } else { None };
    if ahead && pf.is_none() {
        return Err(err("the read-ahead did not start: no Engram tables"));
    }
    let mut out = Vec::new();
    for (i, c) in p.chunks(chunk).enumerate() {
        let last = i + 1 == lens.len();
        let l = match pf.as_mut() {
            Some(pf) => gm.prefill_prefetched(&mut lane, c, last, pf),
            None => gm.prefill(&mut lane, c, last),
        };
        out.extend(l.map_err(err)?);
    }
    for _ in 0..3 {
        let t = argmax(out.last().ok_or_else(|| err("no logits"))?);
        let rows = if ahead {
            let pf = gm.prefetch_after(lane.engram.as_ref(), &[t], &[1], (1, 2)).map_err(err)?;
            gm.decode_prefetched(&mut lane, &[t], &mut pf.ok_or_else(|| err("no decode read-ahead"))?)
        } else {
            gm.decode(&mut lane, &[t])
        };
        out.push(rows.map_err(err)?.remove(0));
    }
    Ok(out)
}

/// The tiny model's tables read from disk (both modes) through the read-ahead against the mapped tables, replay on and off.
pub fn check(gpu: &'static Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let dir = std::env::current_dir().map_err(err)?.join(format!("tf-dsv41-engram-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    write_checkpoint(TinyKind::Tiny, 0, &dir).map_err(err)?;
    let result = (|| {
        for replay in [true, false] {
            let base = Options { replay, ..Options::default() };
            let mapped = GpuModel::load(&dir, base, gpu).map_err(err)?;
            let p = prompt(rng, 150, mapped.cfg().vocab_size);
            let want = run(&mapped, &p, 32, false)?;
            for mode in [IoMode::Mmap, IoMode::Direct] {
                let disk = GpuModel::load(&dir, Options { engram_io: Some(mode), ..base }, gpu).map_err(err)?;
                let got = run(&disk, &p, 32, true)?;
                let has = disk.engram_tables.iter().any(Option::is_some);
                let same = got == want;
                report.row(
                    "engram read-ahead",
                    format!("tiny replay {}, {mode:?}", if replay { "on" } else { "off" }),
                    format!(
                        "150-token prompt in chunks of 32 + 3 decode rows: {} rows, equal to mapped {same}",
                        got.len()
                    ),
                    same && has && got.len() == 4,
                );
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
