//! `tf serve --tp N`: ranks as threads of this process, or as processes meeting over TCP or NCCL (`--tp-addr`, `--tp-rank`, `--tp-transport`).

use super::Engine;
use super::serve::{Device, ServeConfig, model_dir};
use crate::error::Error;
use crate::lanes::LaneHost;
use crate::tokenizer::Tokenizer;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tf_collective::{Comm, NcclComm, TcpComm};
use tf_dsv41::Model;
use tf_dsv41::cuda::GpuModel;
use tf_dsv41::tp::lockstep::{Leader, Rank};

fn deadline(cfg: &ServeConfig) -> Duration {
    Duration::from_millis(cfg.tp_deadline_ms)
}

/// This process's rank of a `--tp-addr` group, over TCP or (`--tp-transport nccl`) NCCL on its GPU.
fn join(cfg: &ServeConfig, rank: usize, addr: &str) -> Result<Box<dyn Comm>, Error> {
    let failed = |e: String| Error::Tp(format!("rank {rank} of {} at {addr}: {e}", cfg.tp));
    let comm: Box<dyn Comm> = match (cfg.tp_nccl, cfg.device) {
        (true, Device::Cuda(gpu)) => {
            Box::new(NcclComm::join(gpu, rank, cfg.tp, addr, Some(deadline(cfg))).map_err(failed)?)
        }
        (true, Device::Cpu) => return Err(failed("NCCL needs --device cuda:N".into())),
        (false, _) => {
            Box::new(TcpComm::join(rank, cfg.tp, addr, Some(deadline(cfg))).map_err(|e| failed(e.to_string()))?)
        }
    };
    let over = if cfg.tp_nccl { "NCCL" } else { "TCP" };
    tracing::info!(rank, world = cfg.tp, %addr, over, "tensor-parallel group joined");
    Ok(comm)
}

/// Rank 0's engine: threads for every rank (rank r on GPU base + r with `--device cuda:base`), or this process's rank of a TCP group on its own `--device`; a lost group exits 70.
pub fn load_leader(dir: &Path, cfg: &ServeConfig, opts: tf_dsv41::Options) -> Result<Engine, Error> {
    match cfg.device {
        Device::Cpu => lead(dir, cfg, opts, |_, m| Ok(m)),
        Device::Cuda(base) => lead(dir, cfg, opts, |rank, m| GpuModel::upload_rank(m, base + rank, cfg.cuda_graphs)),
    }
}

fn lead<F: Rank + Send + 'static>(
    dir: &Path,
    cfg: &ServeConfig,
    opts: tf_dsv41::Options,
    place: impl Fn(usize, Model) -> Result<F, tf_dsv41::Error>,
) -> Result<Engine, Error> {
    let tok = Tokenizer::from_file(dir.join("tokenizer.json"))?;
    let bos = tf_dsv41::Config::load(dir).map_err(|e| Error::Tp(format!("{}: {e}", dir.display())))?.bos_token_id;
    let mut leader = match &cfg.tp_addr {
        None => {
            let (leader, followers) = tf_dsv41::tp::spawn_with(dir, opts, cfg.tp, deadline(cfg), place)?;
            for f in followers {
                // A follower that loses the group says why; the leader's next step then exits 70.
                std::thread::spawn(move || {
                    if let Ok(Err(e)) = f.join() {
                        tracing::error!(reason = %e, "lockstep_lost on a follower");
                    }
                });
            }
            leader
        }
        Some(addr) => {
            let comm = join(cfg, 0, addr)?;
            tf_dsv41::tp::same_everywhere(dir, &opts, &*comm)?;
            let (model, comm) = tf_dsv41::tp::load_rank(dir, opts, comm)?;
            Leader::new(place(0, model)?, comm)
        }
    };
    leader.exit_on_lost = true;
    Ok(Engine { host: LaneHost::spawn(leader, cfg.limits), tok: Arc::new(tok), bos })
}

/// A follower process (`--tp-rank` above 0): joins rank 0 over TCP or NCCL and runs its frames (on its own `--device`) until it stops; a lost group exits 70.
pub fn follow(cfg: &ServeConfig) -> Result<(), Error> {
    let addr = cfg.tp_addr.as_deref().ok_or_else(|| Error::Tp("--tp-rank above 0 needs --tp-addr".into()))?;
    let dir = model_dir(cfg.model_dir.as_deref())?;
    let opts = cfg.model_options();
    let comm = join(cfg, cfg.tp_rank, addr)?;
    tf_dsv41::tp::same_everywhere(&dir, &opts, &*comm)?;
    let (model, comm) = tf_dsv41::tp::load_rank(&dir, opts, comm)?;
    tracing::info!(rank = cfg.tp_rank, world = cfg.tp, "following rank 0");
    let followed = match cfg.device {
        Device::Cpu => tf_dsv41::tp::lockstep::follow(&model, &comm),
        Device::Cuda(n) => tf_dsv41::tp::lockstep::follow(&GpuModel::upload_rank(model, n, cfg.cuda_graphs)?, &comm),
    };
    if let Err(e) = followed {
        tracing::error!(reason = %e, "lockstep_lost");
        std::process::exit(70);
    }
    Ok(())
}
