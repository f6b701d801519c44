//! NCCL (issue 25): world 1 on this GPU, or a group of processes one per GPU (scripts/gpu-tp.sh); collectives as the in-process group, TPn over NCCL == plain bit for bit.

use crate::e2e::{argmax, err};
use std::time::Duration;
use std::time::Instant;
use tf_collective::nccl::{NcclComm, unique_id, version};
use tf_collective::{Comm, CommError, InProcessComm};
use tf_cuda::Error;
use tf_cuda::report::Report;
use tf_dsv41::cuda::GpuModel;
use tf_dsv41::tiny::TinyKind;
use tf_dsv41::tp::lockstep::Leader;
use tf_dsv41::{Model, Options};
use tf_family::Family;

/// The same calls on any communicator: sums, gathers, broadcasts, a length mismatch, then a barrier that shows the group survived it.
fn collectives(c: &dyn Comm) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = vec![1.5f32, -2.0, 3.25e-3];
    out.push(format!("{:?} {:?}", c.all_reduce_sum(&mut buf), buf));
    let mut all = vec![0.0f32; 2];
    out.push(format!(
        "{:?} {:?}",
        c.all_gather(&[7.0, -0.0], &mut all),
        all.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    ));
    let mut part = vec![0.0f32; 3];
    out.push(format!("{:?} {:?}", c.reduce_scatter_sum(&[1.0, 2.0, 3.0], &mut part), part));
    let mut b = vec![4.0f32, 5.0];
    out.push(format!("{:?} {:?}", c.broadcast(&mut b, 0), b));
    let mut frame = b"a frame".to_vec();
    out.push(format!("{:?} {:?}", c.broadcast_bytes(&mut frame, 0), frame));
    let mismatch = c.all_gather(&[1.0, 2.0], &mut [0.0; 3]);
    out.push(format!("mismatch is LengthMismatch: {}", matches!(mismatch, Err(CommError::LengthMismatch { .. }))));
    out.push(format!("barrier after it: {:?}", c.barrier()));
    let (r, w) = (c.rank(), c.world_size());
    let mut got = vec![0.0f32; 2];
    out.push(format!("{:?} {got:?}", c.send_recv(&[r as f32, 0.5], (r + 1) % w, &mut got, (r + w - 1) % w)));
    out.push(format!("{:?}", c.send_recv(&[1.0], (r + 1) % w, &mut got, (r + w - 1) % w)));
    out.push(format!("{:?}", c.send(&[1.0], w)));
    out
}

/// A chunked prompt, greedy decode steps, verify windows cut back to their first row, and a fork: every logits row.
pub(crate) fn script<F: Family>(f: &F, vocab: u32) -> Result<Vec<Vec<f32>>, Error> {
    let prompt: Vec<u32> = (0..60u32).map(|j| (j * 97 + 5) % (vocab - 4) + 4).collect();
    let mut lane = f.new_lane().map_err(err)?;
    let mut rows = Vec::new();
    for (i, c) in prompt.chunks(13).enumerate() {
        rows.extend(f.prefill(&mut lane, c, (i + 1) * 13 >= prompt.len()).map_err(err)?);
    }
    for step in 0..9 {
        let t = argmax(rows.last().expect("a row"));
        if step % 3 == 2 {
            rows.push(f.verify(&mut lane, &[t, (t + 1) % vocab, (t + 2) % vocab]).map_err(err)?.remove(0));
            f.rewind(&mut lane, 1).map_err(err)?;
        } else {
            rows.extend(f.decode(&mut lane, &[t]).map_err(err)?);
        }
    }
    let mut fork = f.fork(&lane).map_err(err)?;
    rows.extend(f.decode(&mut fork, &[3]).map_err(err)?);
    Ok(rows)
}

pub fn check(ordinal: usize, report: &mut Report) -> Result<(), Error> {
    let v = match version() {
        Ok(v) => v,
        Err(e) => {
            report.row("nccl", "load libnccl", e, false);
            return Ok(());
        }
    };
    report.row("nccl", "load libnccl", format!("version code {v}"), true);
    let open = || -> Result<NcclComm, Error> {
        NcclComm::new(ordinal, 0, 1, unique_id().map_err(err)?, Some(Duration::from_secs(30))).map_err(err)
    };
    let nccl = open()?;
    let want = collectives(&InProcessComm::group(1).remove(0));
    let got = collectives(&nccl);
    report.row("nccl", "world 1: every collective as the in-process group", format!("{got:?}"), got == want);
    drop(nccl);
    let dir = crate::e2e::TempModel::write("nccl", TinyKind::Tiny)?;
    let plain = Model::load(&dir, Options::default()).map_err(err)?;
    let vocab = plain.cfg.vocab_size as u32;
    let want = script(&plain, vocab)?;
    let opts = Options { split_heads: true, ..Options::default() };
    let (model, comm) = tf_dsv41::tp::load_rank(&dir, opts, Box::new(open()?)).map_err(err)?;
    let got = script(&Leader::new(model, comm), vocab)?;
    let same = got.len() == want.len() && got.iter().zip(&want).all(|(a, b)| a == b);
    report.row("nccl", "tiny TP1 over NCCL (experts and heads split) == plain", format!("{} rows", got.len()), same);
    let (model, comm) = tf_dsv41::tp::load_rank(&dir, opts, Box::new(open()?)).map_err(err)?;
    let got = script(&Leader::new(GpuModel::upload_rank(model, ordinal, false).map_err(err)?, comm), vocab)?;
    report.row(
        "nccl",
        "tiny GPU rank, TP1 over NCCL (all splits) == plain",
        format!("{} rows", got.len()),
        got == want,
    );
    Ok(())
}

/// Rank `rank`'s part of a group of `world` processes (`TF_NCCL_WORLD`, `TF_NCCL_RANK`, `TF_NCCL_ADDR`), one GPU each.
pub fn check_group(world: usize, rank: usize, addr: &str, report: &mut Report) -> Result<(), Error> {
    let timeout = Some(Duration::from_secs(60));
    let comm = NcclComm::join(rank, rank, world, addr, timeout).map_err(err)?;
    let mine = |r: usize| vec![0.1f32 * (r + 1) as f32, -3.0e-4 * r as f32, 7.0];
    let mut sum = mine(rank);
    let ok = comm.all_reduce_sum(&mut sum).is_ok();
    let want = (1..world).fold(mine(0), |acc, r| acc.iter().zip(mine(r)).map(|(a, b)| a + b).collect());
    report.row(
        "nccl group",
        format!("rank {rank} of {world}: all_reduce_sum in rank order"),
        format!("{sum:?}"),
        ok && sum == want,
    );
    let mut all = vec![0.0f32; 3 * world];
    let ok = comm.all_gather(&mine(rank), &mut all).is_ok();
    report.row(
        "nccl group",
        format!("rank {rank}: all_gather"),
        "",
        ok && all == (0..world).flat_map(mine).collect::<Vec<_>>(),
    );
    let bad = comm.all_gather(&vec![1.0; 2 + usize::from(rank == world - 1)], &mut vec![0.0; 2 * world]);
    let usable = comm.barrier().is_ok();
    let mismatch = matches!(bad, Err(CommError::LengthMismatch { .. }));
    report.row(
        "nccl group",
        format!("rank {rank}: a length mismatch errors everywhere, the group goes on"),
        "",
        mismatch && usable,
    );
    // A ring shift each way, then pairs with rank 0 in turn: NCCL's grouped send and receive between processes.
    let (right, left) = ((rank + 1) % world, (rank + world - 1) % world);
    let mut got = vec![0.0f32; 3];
    let shift = comm.send_recv(&mine(rank), right, &mut got, left).is_ok() && got == mine(left);
    let back = comm.send_recv(&mine(rank), left, &mut got, right).is_ok() && got == mine(right);
    let pairs = (1..world).all(|q| match rank {
        0 => comm.send(&mine(q), q).is_ok() && comm.recv(&mut got, q).is_ok() && got == mine(q + world),
        r if r == q => comm.recv(&mut got, 0).is_ok() && got == mine(q) && comm.send(&mine(q + world), 0).is_ok(),
        _ => true,
    });
    report.row("nccl group", format!("rank {rank}: ring shifts and pairs by send/recv"), "", shift && back && pairs);
    for mb in [1usize, 16, 64] {
        let n = mb << 18;
        let (send, mut recv) = (vec![1.0f32; n], vec![0.0f32; n * world]);
        comm.all_gather(&send, &mut recv).map_err(err)?;
        let t = Instant::now();
        comm.all_gather(&send, &mut recv).map_err(err)?;
        let s = t.elapsed().as_secs_f64();
        let gbps = (n * 4 * world) as f64 / s / 1e9;
        report.row(
            "nccl group",
            format!("rank {rank}: all_gather of {mb} MB a rank"),
            format!("{:.2} ms, {gbps:.2} GB/s gathered (host staging included)", s * 1e3),
            true,
        );
    }
    let dir = crate::e2e::TempModel::write(&format!("nccl-group-{rank}"), TinyKind::Tiny)?;
    // GPU ranks, one per GPU, experts, heads, vocabulary and Engram split: what `tf serve --tp N --device cuda` runs.
    let opts = Options { split_heads: true, ..Options::default() };
    tf_dsv41::tp::same_everywhere(&dir, &opts, &comm).map_err(err)?;
    let (model, shared) = tf_dsv41::tp::load_rank(&dir, opts, Box::new(comm)).map_err(err)?;
    let model = GpuModel::upload_rank(model, rank, false).map_err(err)?;
    if rank > 0 {
        let r = tf_dsv41::tp::lockstep::follow(&model, &shared);
        report.row("nccl group", format!("rank {rank}: followed rank 0 to its stop"), format!("{r:?}"), r.is_ok());
    } else {
        let plain = Model::load(&dir, Options::default()).map_err(err)?;
        let vocab = plain.cfg.vocab_size as u32;
        let want = script(&plain, vocab)?;
        let got = script(&Leader::new(model, shared), vocab)?;
        let same = got.len() == want.len() && got.iter().zip(&want).all(|(a, b)| a == b);
        report.row(
            "nccl group",
            format!("tiny TP{world}, GPU ranks over NCCL (all splits) == plain"),
            format!("{} rows", got.len()),
            same,
        );
    }
    Ok(())
}
