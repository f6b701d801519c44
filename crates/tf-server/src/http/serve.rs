//! `tf serve`: bind, load the model in the background (health is 503 until then), serve until Ctrl-C.

use super::{AppState, Engine, router};
use crate::error::{Error, UnknownValue};
use crate::lanes::{LaneHost, Limits};
use crate::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Everything `tf serve` is told on its command line.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub model_dir: Option<PathBuf>,
    pub host: String,
    pub port: u16,
    pub api_key: Option<String>,
    pub limits: Limits,
    pub replay: bool,
    pub device: Device,
    /// Engram rows from the mapped checkpoint (`None`) or read from its shards in this mode (`--engram-io`).
    pub engram_io: Option<tf_dsv41::EngramIo>,
    /// Rows of each disk table kept decoded in host memory (`--engram-cache-rows`, 0: none); measured in docs/engram-disk.md.
    pub engram_cache_rows: usize,
    /// DeepSeek's original checkpoint to take the Engram tables from (`--engram-from`): an EXL3 checkpoint keeps none.
    pub engram_from: Option<PathBuf>,
    /// `--sequential-sums`: RMSNorm and mHC x² in index order, the contract before 32 lanes (docs/numerics.md); off by default.
    pub sequential_sums: bool,
    /// `--sequential-wo-a`: grouped `wo_a` in index order, the order before the 8-lane default (docs/numerics.md); off by default.
    pub sequential_wo_a: bool,
    /// Tier-2 switch (`--exl3-kernels fast`): EXL3 on the GPU through tensor cores instead of the exact kernels; off by default.
    pub exl3_fast: bool,
    /// Tier-2 switch (`--exl3-prompt gemm [--exl3-prompt-min-rows N]`): GPU calls of at least N rows run EXL3 as an fp16 GEMM; off by default.
    pub exl3_prompt_gemm: Option<usize>,
    /// Tier-2 switch (`--prefill-experts mxfp4`): MXFP4 copies of EXL3 routed experts for long prompt chunks; off by default.
    pub prefill_mxfp4: Option<tf_dsv41::PrefillMxfp4>,
    /// Tier-2 switch (`--expert-top-p P`, CPU): each row skips its lightest routed experts past share P of its weight; off by default.
    pub expert_top_p: Option<tf_dsv41::TopP>,
    /// `--cuda-graphs`: each decode step recorded and launched as one CUDA graph (same bits; off, as it measured no faster).
    pub cuda_graphs: bool,
    /// `--tp N`: N ranks (threads, or processes with `tp_addr`), routed experts (and heads, `tp_split_heads`) split between them; with `device` cuda:B, thread rank r runs on GPU B + r.
    pub tp: usize,
    /// `--tp-split heads` (the default): attention heads split over the ranks too, not only the routed experts.
    pub tp_split_heads: bool,
    /// `--tp-experts width`: every routed expert split by width over the ranks instead of whole experts per rank.
    pub tp_expert_width: bool,
    /// `--tp-sp-rows N`: calls of at least N rows split their row-local work by rows over the ranks (0: off).
    pub tp_sp_rows: usize,
    /// `--tp-profile DIR`: per-collective timings of every rank, one JSON line each.
    pub tp_profile: Option<PathBuf>,
    /// `--tp-deadline-ms`: longest wait of any collective before lockstep counts as lost (the server then exits 70).
    pub tp_deadline_ms: u64,
    /// `--tp-addr HOST:PORT`: ranks are processes (this host or others) meeting at rank 0's address over TCP; `None`: threads.
    pub tp_addr: Option<String>,
    /// `--tp-rank R`: this process's rank with `--tp-addr`; rank 0 serves HTTP, the others follow it.
    pub tp_rank: usize,
    /// `--tp-transport nccl`: `tp_addr` ranks talk over NCCL (one GPU each) instead of TCP.
    pub tp_nccl: bool,
}

impl ServeConfig {
    /// The forward's switches these flags ask for (every tensor-parallel rank loads with the same).
    pub fn model_options(&self) -> tf_dsv41::Options {
        tf_dsv41::Options {
            replay: self.replay,
            engram_io: self.engram_io,
            engram_cache_rows: self.engram_cache_rows,
            sequential_sums: self.sequential_sums,
            sequential_wo_a: self.sequential_wo_a,
            exl3_fast: self.exl3_fast,
            exl3_prompt_gemm: self.exl3_prompt_gemm,
            prefill_mxfp4: self.prefill_mxfp4,
            expert_top_p: self.expert_top_p,
            split_heads: self.tp_split_heads,
            expert_width: self.tp_expert_width,
            sp_rows: self.tp_sp_rows,
            tp_profile: self.tp_profile.as_deref().map(|d| &*Box::leak(d.to_path_buf().into_boxed_path())),
            ..tf_dsv41::Options::default()
        }
        .with_engram_from(self.engram_from.as_deref())
    }
}

/// Where the model runs: the CPU reference, or one NVIDIA GPU by ordinal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    #[default]
    Cpu,
    Cuda(usize),
}

impl std::str::FromStr for Device {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Device, UnknownValue> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s.strip_prefix("cuda:").and_then(|n| n.parse().ok()).map(Device::Cuda).ok_or_else(|| UnknownValue {
                what: "device",
                value: s.into(),
                expected: "expected cpu, cuda or cuda:N",
            }),
        }
    }
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            model_dir: None,
            host: "127.0.0.1".into(),
            port: 8000,
            api_key: None,
            limits: Limits::default(),
            replay: true,
            engram_io: None,
            engram_cache_rows: 0,
            engram_from: None,
            device: Device::Cpu,
            sequential_sums: false,
            sequential_wo_a: false,
            exl3_fast: false,
            exl3_prompt_gemm: None,
            prefill_mxfp4: None,
            expert_top_p: None,
            cuda_graphs: false,
            tp: 1,
            tp_split_heads: true,
            tp_expert_width: false,
            tp_profile: None,
            tp_sp_rows: tf_dsv41::SP_ROWS,
            tp_deadline_ms: 30_000,
            tp_addr: None,
            tp_nccl: false,
            tp_rank: 0,
        }
    }
}

/// The model used with no `--model`: the shipped gate model, expanded into the cache on first run.
pub fn default_model() -> Result<PathBuf, Error> {
    default_model_in(&tf_dsv41::gate_model::gate_model_assets(), &tf_core::cache_dir())
}

/// The directory to load for `--model`: none is the shipped gate model, a compact gate model (`--model assets/gate-model`) its expansion.
pub fn model_dir(given: Option<&Path>) -> Result<PathBuf, Error> {
    match given {
        None => default_model(),
        Some(dir) => Ok(tf_dsv41::gate_model::resolve(dir).map_err(tf_dsv41::Error::from)?),
    }
}

/// [`default_model`] from gate-model `assets`, expanded under `cache_root`.
pub fn default_model_in(assets: &Path, cache_root: &Path) -> Result<PathBuf, Error> {
    require_gate_model(assets)?;
    let t = std::time::Instant::now();
    let dir = tf_dsv41::gate_model::ensure(assets, cache_root).map_err(tf_dsv41::Error::from)?;
    tracing::info!(dir = %dir.display(), seconds = t.elapsed().as_secs_f32(), "gate model ready");
    Ok(dir)
}

/// Fails naming the manifest when the checkout has no gate model.
fn require_gate_model(assets: &Path) -> Result<(), Error> {
    let manifest = assets.join("gate-model.json");
    if manifest.is_file() { Ok(()) } else { Err(Error::NoGateModel { manifest }) }
}

/// Loads tokenizer and model from a checkpoint directory and starts its lane host (`graphs`: CUDA graph decode steps).
pub fn load_engine(
    dir: &Path,
    limits: Limits,
    opts: tf_dsv41::Options,
    device: Device,
    graphs: bool,
) -> Result<Engine, Error> {
    let tok = Tokenizer::from_file(dir.join("tokenizer.json"))?;
    let gpu = match device {
        Device::Cpu => None,
        Device::Cuda(n) => Some(n),
    };
    let model = tf_dsv41::family::Loaded::load(dir, opts, gpu, graphs)?;
    let bos = model.bos();
    let host = match model {
        tf_dsv41::family::Loaded::Cpu(m) => LaneHost::spawn(*m, limits),
        tf_dsv41::family::Loaded::Cuda(m) => LaneHost::spawn(*m, limits),
    };
    Ok(Engine { host, tok: Arc::new(tok), bos })
}

/// Serves `cfg` on a free loopback port from a thread of its own (tests, benches, embedding); the address comes back at once and the model loads in the background.
pub fn spawn_loopback(cfg: ServeConfig) -> std::io::Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new().name("tf-serve".into()).spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
        rt.block_on(async move {
            let served = match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => serve_on(l, cfg).await,
                Err(e) => Err(e),
            };
            if let Err(e) = served {
                tracing::error!(error = %e, "the loopback server stopped");
            }
        });
    })?;
    Ok(addr)
}

/// Serves on an already bound listener; the engine loads in the background.
pub async fn serve_on(listener: tokio::net::TcpListener, cfg: ServeConfig) -> std::io::Result<()> {
    let model_id = cfg
        .model_dir
        .as_deref()
        .and_then(Path::file_name)
        .map_or_else(|| "tensorfold-gate".into(), |n| n.to_string_lossy().into_owned());
    let state = Arc::new(AppState::new(model_id, cfg.api_key.clone()));
    let loader = state.clone();
    tokio::task::spawn_blocking(move || {
        let loaded = model_dir(cfg.model_dir.as_deref()).and_then(|dir| {
            let opts = cfg.model_options();
            // A group of one over --tp-addr runs the tensor-parallel path too (NCCL's one-GPU check).
            if cfg.tp > 1 || cfg.tp_addr.is_some() {
                return super::tp::load_leader(&dir, &cfg, opts);
            }
            load_engine(&dir, cfg.limits, opts, cfg.device, cfg.cuda_graphs)
        });
        match loaded {
            Ok(e) => {
                let _ = loader.engine.set(e);
                tracing::info!("model loaded, ready");
            }
            Err(e) => {
                tracing::error!("cannot load the model: {e}");
                std::process::exit(1);
            }
        }
    });
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await
}

/// `tf serve`: binds `host:port` and serves until Ctrl-C.
pub fn run(cfg: ServeConfig) -> Result<(), Error> {
    if cfg.tp_rank > 0 {
        return super::tp::follow(&cfg);
    }
    // Said before binding: otherwise the server would listen, then exit when the background load fails.
    if cfg.model_dir.is_none() {
        require_gate_model(&tf_dsv41::gate_model::gate_model_assets())?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind((cfg.host.as_str(), cfg.port))
            .await
            .map_err(|source| Error::Bind { addr: format!("{}:{}", cfg.host, cfg.port), source })?;
        tracing::info!("listening on http://{}", listener.local_addr()?);
        Ok(serve_on(listener, cfg).await?)
    })
}
