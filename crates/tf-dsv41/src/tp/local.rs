//! Tensor parallel on one host (issue 25): one thread per rank over the in-process communicator, rank 0 leading.

use super::SharedComm;
use super::lockstep::{Leader, Rank, follow};
use crate::{Error, Model, Options};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;
use tf_collective::InProcessComm;

/// A follower thread's end: `Ok` after the leader's stop, `Err` when the group was lost.
pub type Follower = JoinHandle<Result<(), String>>;

impl Model {
    /// Hands this rank's communicator to every split MoE and attention layer, and to the row shares of long calls.
    pub fn attach_comm(&mut self, comm: &SharedComm) {
        if self.opts.ep.is_some() {
            for b in &mut self.blocks {
                b.ffn.ep = Some(comm.clone());
                if let Some(s) = &mut b.attn.split {
                    s.comm = Some(comm.clone());
                }
                let sp = (self.opts.sp_rows > 0)
                    .then(|| super::RowShare { comm: comm.clone(), min_rows: self.opts.sp_rows });
                (b.attn.sp, b.ffn.sp) = (sp.clone(), sp);
                if let Some(t) = b.engram.as_mut().and_then(|g| g.split.as_mut()) {
                    t.comm = Some(comm.clone());
                }
            }
            if let Some(v) = &mut self.vocab {
                v.comm = Some(comm.clone());
            }
        }
    }
}

/// For ranks in separate processes, before [`load_rank`]: refuses unless every rank has the same config and numerics and split options.
pub fn same_everywhere(dir: &Path, opts: &Options, comm: &dyn tf_collective::Comm) -> Result<(), Error> {
    let cfg = crate::Config::load(dir).map_err(|e| Error::Refused(format!("{}: {e}", dir.display())))?;
    let o = opts;
    let what = format!(
        "{cfg:?} {:?}",
        (
            o.replay,
            o.quirks,
            o.sequential_sums,
            o.sequential_wo_a,
            o.prefill_mxfp4,
            o.exl3_fast,
            o.exl3_prompt_gemm,
            o.split_heads,
            o.expert_width,
            o.sp_rows,
            o.expert_top_p
        )
    );
    // FNV-1a: the same on every host and build, unlike std's hasher.
    let h = what.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let mine: Vec<f32> = (0..4).map(|i| f32::from((h >> (16 * i)) as u16)).collect();
    let mut all = vec![0.0f32; 4 * comm.world_size()];
    comm.all_gather(&mine, &mut all).map_err(|e| Error::Refused(format!("tensor parallel: comparing ranks: {e}")))?;
    let differ: Vec<usize> = (1..comm.world_size()).filter(|&r| all[4 * r..4 * r + 4] != all[..4]).collect();
    if differ.is_empty() {
        return Ok(());
    }
    Err(Error::Refused(format!(
        "tensor-parallel ranks {differ:?} load a different config or options than rank 0: start every rank with the same model and flags"
    )))
}

/// Loads rank `rank` of `world` from `dir` (its share of the routed experts) on `comm`.
pub fn load_rank(dir: &Path, opts: Options, comm: Box<dyn tf_collective::Comm>) -> Result<(Model, SharedComm), Error> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let comm = match opts.tp_profile {
        Some(dir) => Box::new(
            tf_collective::Profiled::new(comm, dir)
                .map_err(|e| Error::Refused(format!("--tp-profile {}: {e}", dir.display())))?,
        ),
        None => comm,
    };
    let comm = SharedComm::new(comm);
    let mut model = crate::family::load_dsv41(dir, Options { ep: Some((rank, world)), ..opts })?;
    model.attach_comm(&comm);
    Ok((model, comm))
}

/// Loads `world` ranks of `dir` (each with its share of the routed experts) and starts the followers; every collective waits at most `deadline`.
pub fn spawn(dir: &Path, opts: Options, world: usize, deadline: Duration) -> Result<(Leader, Vec<Follower>), Error> {
    spawn_with(dir, opts, world, deadline, |_, m| Ok(m))
}

/// [`spawn`], each rank's loaded model first turned into its serving backend by `place(rank, model)` (a GPU rank: uploaded to its GPU).
pub fn spawn_with<F: Rank + Send + 'static>(
    dir: &Path,
    opts: Options,
    world: usize,
    deadline: Duration,
    place: impl Fn(usize, Model) -> Result<F, Error>,
) -> Result<(Leader<F>, Vec<Follower>), Error> {
    let comms = InProcessComm::group_with_timeout(world.max(1), deadline);
    let mut followers = Vec::new();
    let mut leader = None;
    for (rank, comm) in comms.into_iter().enumerate() {
        let (model, comm) = load_rank(dir, opts, Box::new(comm))?;
        let model = place(rank, model)?;
        if rank == 0 {
            leader = Some(Leader::new(model, comm));
            continue;
        }
        let name = format!("tp-rank-{rank}");
        let handle = std::thread::Builder::new().name(name).spawn(move || follow(&model, &comm));
        followers.push(handle.map_err(|e| Error::Refused(format!("cannot start rank {rank}: {e}")))?);
    }
    Ok((leader.expect("rank 0 exists"), followers))
}
