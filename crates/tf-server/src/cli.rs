//! The `tf` command line (clap derive): `serve`, `generate`, `inspect` and `plan`, with the loading flags defined once.

use crate::generate;
use crate::http::serve::{Device, ServeConfig};
use crate::lanes::{Admission, Limits};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "tf", version, about = "TensorFold-rs: DeepSeek-V4.1-Flash inference")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// OpenAI-compatible server (no --model: the shipped gate model, expanded on first run)
    Serve(Box<ServeArgs>),
    /// Greedy text from a prompt (CPU reference or --device cuda; no --model: the default model)
    Generate(GenerateArgs),
    /// List a checkpoint directory, model.safetensors.index.json, or one .safetensors file
    Inspect(InspectArgs),
    /// Per-GPU memory of a tensor-parallel split and the longest context that fits
    Plan(crate::plan::PlanArgs),
    /// Per-collective summary of the files `tf serve --tp-profile DIR` wrote (calls, bytes, time in op, skew between ranks)
    TpProfile {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

/// How a checkpoint loads: shared by `serve` and `generate`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct LoadArgs {
    /// Load with CED bounded replay off
    #[arg(long)]
    pub no_replay: bool,
    /// Take the Engram tables from DeepSeek's original checkpoint (an EXL3 one has none)
    #[arg(long, value_name = "DIR")]
    pub engram_from: Option<PathBuf>,
}

#[derive(Clone, Debug, clap::Args)]
pub struct GenerateArgs {
    /// Checkpoint directory with config.json, safetensors shards and tokenizer.json (default: the gate model)
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Prompt text (BOS is prepended)
    #[arg(long, value_name = "TEXT")]
    pub prompt: String,
    /// Stop after N generated tokens; EOS stops earlier
    #[arg(long, value_name = "N", default_value_t = 32, allow_negative_numbers = true)]
    pub max_tokens: usize,
    /// Where the model runs: cpu, cuda or cuda:N
    #[arg(long, default_value = "cpu", value_parser = |s: &str| s.parse::<Device>())]
    pub device: Device,
    /// Prefill the prompt N tokens at a time (default: all at once)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub chunk: Option<u64>,
    #[command(flatten)]
    pub load: LoadArgs,
}

impl GenerateArgs {
    pub fn into_args(self) -> generate::Args {
        generate::Args {
            model: self.model,
            prompt: self.prompt,
            max_tokens: self.max_tokens,
            chunk: self.chunk.map(|c| c as usize),
            replay: !self.load.no_replay,
            engram_from: self.load.engram_from,
            gpu: match self.device {
                Device::Cpu => None,
                Device::Cuda(n) => Some(n),
            },
        }
    }
}

#[derive(Clone, Debug, clap::Args)]
pub struct InspectArgs {
    /// A checkpoint directory, an index file or one .safetensors shard
    pub path: PathBuf,
    /// Only tensors whose name contains TEXT
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngramIo {
    Mapped,
    Mmap,
    Direct,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Exl3Kernels {
    Exact,
    Fast,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Exl3Prompt {
    Gemv,
    Gemm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrefillExperts {
    Exl3,
    Mxfp4,
}

/// How `--tp` splits the routed experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TpExpertsArg {
    /// Whole experts per rank (expert parallel)
    Whole,
    /// Every expert split by width, its down projection's sums chained rank to rank (CPU ranks; FP4 experts)
    Width,
}

/// What `--tp` splits over its ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TpSplitArg {
    /// Routed experts and attention heads (whole `wo_a` groups, `wo_b` by rows)
    Heads,
    /// Routed experts only; attention whole on every rank
    Experts,
}

/// How `--tp-addr` ranks talk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TpTransportArg {
    /// A TCP ring, plus a link to each peer for messages (any device)
    Tcp,
    /// NCCL, one GPU per process (--device cuda:N); rank 0's id travels over TCP at the address first
    Nccl,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AdmissionArg {
    Fifo,
    ShortFirst,
}

#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// Checkpoint directory (default: the shipped gate model, expanded into the cache on first run)
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Where the model runs: cpu, cuda or cuda:N
    #[arg(long, default_value = "cpu", value_parser = |s: &str| s.parse::<Device>())]
    pub device: Device,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on /v1, /tokenize and /detokenize
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Engram rows from the mapped checkpoint, or read from its shards by mmap or O_DIRECT
    #[arg(long, value_enum, default_value = "mapped")]
    pub engram_io: EngramIo,
    /// Rows of each disk table kept decoded in host memory (needs --engram-io mmap|direct)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub engram_cache_rows: usize,
    /// RMSNorm and mHC x² in index order, the earlier contract (the default is 32 lanes; docs/numerics.md)
    #[arg(long)]
    pub sequential_sums: bool,
    /// Grouped wo_a in index order, the earlier order (the default is 8 lanes; docs/numerics.md)
    #[arg(long)]
    pub sequential_wo_a: bool,
    /// Accepted for old scripts: the 32-lane sums are now the default
    #[arg(long, hide = true)]
    pub wide_sums: bool,
    /// Tier-2 switch (CPU): a row skips its lightest routed experts past share P of its routing weight (not gated yet)
    #[arg(long, value_name = "P")]
    pub expert_top_p: Option<f32>,
    /// Record each decode step as a CUDA graph (same bits; needs --device cuda)
    #[arg(long)]
    pub cuda_graphs: bool,
    /// Tensor parallel over N ranks on this host (CPU, one thread each; experts and heads split, replies equal one rank's bit for bit)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub tp: u16,
    /// Ranks as processes (this host or others) meeting at rank 0's HOST:PORT over TCP, instead of threads
    #[arg(long, value_name = "HOST:PORT")]
    pub tp_addr: Option<String>,
    /// This process's rank with --tp-addr: 0 serves HTTP, the others follow it (default 0)
    #[arg(long, value_name = "R", default_value_t = 0)]
    pub tp_rank: u16,
    /// What --tp-addr ranks talk over
    #[arg(long, value_enum, default_value = "tcp")]
    pub tp_transport: TpTransportArg,
    /// What --tp splits: experts, attention heads, vocabulary and Engram rows, or experts alone
    #[arg(long, value_enum, default_value = "heads")]
    pub tp_split: TpSplitArg,
    /// How --tp splits the routed experts: whole experts per rank, or each expert by width
    #[arg(long, value_enum, default_value = "whole")]
    pub tp_experts: TpExpertsArg,
    /// Prompt chunks of at least N rows split their row-local projections over the ranks by rows, then gather them (0: off)
    #[arg(long, value_name = "N", default_value_t = tf_dsv41::SP_ROWS)]
    pub tp_sp_rows: usize,
    /// Each rank writes every collective's ready and end times to DIR/rank-<r>.jsonl (read them with `tf tp-profile DIR`)
    #[arg(long, value_name = "DIR")]
    pub tp_profile: Option<PathBuf>,
    /// Longest wait of any tensor-parallel collective; past it lockstep is lost and the server exits 70
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub tp_deadline_ms: u64,
    /// Never draft: plain decode for every request (drafting keeps the bits; it only changes speed)
    #[arg(long)]
    pub no_draft: bool,
    /// Draft tokens per verify window, 1 to 5 (default: chosen per window from DSpark's confidences and measured costs)
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u8).range(1..=5))]
    pub draft_len: Option<u8>,
    /// EXL3 on the GPU: the exact kernels, or tensor cores (tier 2)
    #[arg(long, value_enum, default_value = "exact")]
    pub exl3_kernels: Exl3Kernels,
    /// EXL3 prompt calls: the GEMV, or an fp16 GEMM past --exl3-prompt-min-rows (tier 2, needs --device cuda)
    #[arg(long, value_enum, default_value = "gemv")]
    pub exl3_prompt: Exl3Prompt,
    /// Rows from which EXL3 prompt calls take the GEMM (default 256; needs --exl3-prompt gemm)
    #[arg(long, value_name = "N")]
    pub exl3_prompt_min_rows: Option<usize>,
    /// Routed experts of long prompt chunks: EXL3, or MXFP4 copies (tier 2)
    #[arg(long, value_enum, default_value = "exl3")]
    pub prefill_experts: PrefillExperts,
    /// Encoder layers that get MXFP4 prefill experts (default all; needs --prefill-experts mxfp4)
    #[arg(long, value_name = "N")]
    pub prefill_mxfp4_layers: Option<usize>,
    /// Chunks of fewer rows keep EXL3 (default 2048; needs --prefill-experts mxfp4)
    #[arg(long, value_name = "N")]
    pub prefill_mxfp4_min_rows: Option<usize>,
    /// Requests running at once
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_lanes)]
    pub max_lanes: usize,
    /// Decoding lanes one forward step runs together; 1 runs one lane a step
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_step_lanes as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_step_lanes: u64,
    /// Requests waiting; past it, 429
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_queue)]
    pub max_queue: usize,
    /// Prompt tokens waiting; past it, 429
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_queued_tokens)]
    pub max_queued_tokens: usize,
    /// Prompt plus max_tokens over running lanes; admission waits past it (default unlimited)
    #[arg(long, value_name = "N")]
    pub max_active_tokens: Option<usize>,
    /// Prompt rows per prefill step
    #[arg(long, value_name = "N", default_value_t = Limits::default().prefill_chunk)]
    pub prefill_chunk: usize,
    /// Which waiting request gets the next lane
    #[arg(long, value_enum, default_value = "fifo")]
    pub admission: AdmissionArg,
    /// Prompt-cache granularity in tokens
    #[arg(long, value_name = "N", default_value_t = Limits::default().prefix_block)]
    pub prefix_block: usize,
    /// Tokens held in prompt-cache snapshots altogether (0: off)
    #[arg(long, value_name = "N", default_value_t = Limits::default().prefix_cache_tokens)]
    pub prefix_cache_tokens: usize,
}

impl ServeArgs {
    /// The server's configuration, after the checks between flags that clap cannot express alone.
    pub fn into_config(self) -> Result<ServeConfig, crate::Error> {
        let cpu = self.device == Device::Cpu;
        let mxfp4 = self.prefill_experts == PrefillExperts::Mxfp4;
        let prefill_mxfp4 = match (mxfp4, self.prefill_mxfp4_layers, self.prefill_mxfp4_min_rows) {
            (true, layers, min_rows) => {
                let d = tf_dsv41::PrefillMxfp4::DEFAULT;
                Some(tf_dsv41::PrefillMxfp4 {
                    layers: layers.unwrap_or(d.layers),
                    min_rows: min_rows.unwrap_or(d.min_rows),
                })
            }
            (false, None, None) => None,
            (false, ..) => {
                return Err(crate::Error::Usage(
                    "--prefill-mxfp4-layers and --prefill-mxfp4-min-rows need --prefill-experts mxfp4",
                ));
            }
        };
        if self.wide_sums && self.sequential_sums {
            return Err(crate::Error::Usage(
                "--wide-sums (now the default) and --sequential-sums contradict each other",
            ));
        }
        if self.wide_sums {
            tracing::warn!("--wide-sums is the default now (32-lane sums); the flag does nothing");
        }
        let engram_io = match self.engram_io {
            EngramIo::Mapped => None,
            EngramIo::Mmap => Some(tf_dsv41::EngramIo::Mmap),
            EngramIo::Direct => Some(tf_dsv41::EngramIo::Direct),
        };
        if self.engram_cache_rows > 0 && engram_io.is_none() {
            return Err(crate::Error::Usage(
                "--engram-cache-rows needs --engram-io mmap|direct (mapped tables are in memory)",
            ));
        }
        let exl3_prompt_gemm = match (self.exl3_prompt == Exl3Prompt::Gemm, self.exl3_prompt_min_rows) {
            (true, Some(rows)) if rows < 2 => {
                return Err(crate::Error::Usage(
                    "--exl3-prompt-min-rows must be at least 2: one-row decode steps stay on the GEMV",
                ));
            }
            (true, rows) => Some(rows.unwrap_or(tf_dsv41::EXL3_PROMPT_MIN_ROWS)),
            (false, None) => None,
            (false, Some(_)) => return Err(crate::Error::Usage("--exl3-prompt-min-rows needs --exl3-prompt gemm")),
        };
        if exl3_prompt_gemm.is_some() && cpu {
            return Err(crate::Error::Usage(
                "--exl3-prompt gemm needs --device cuda (the CPU reference has no GEMM path)",
            ));
        }
        if self.tp_rank >= self.tp.max(1) || (self.tp_rank > 0 && self.tp_addr.is_none()) {
            return Err(crate::Error::Usage("--tp-rank must be below --tp, and above 0 only with --tp-addr"));
        }
        if self.tp > 1 && (self.cuda_graphs || exl3_prompt_gemm.is_some()) {
            return Err(crate::Error::Usage(
                "--tp runs without --cuda-graphs and --exl3-prompt gemm for now (GPU ranks gather through the host)",
            ));
        }
        if self.tp_transport == TpTransportArg::Nccl && (cpu || self.tp_addr.is_none()) {
            return Err(crate::Error::Usage(
                "--tp-transport nccl needs --tp-addr and --device cuda:N (ranks as processes, one GPU each)",
            ));
        }
        if self.cuda_graphs && cpu {
            return Err(crate::Error::Usage("--cuda-graphs needs --device cuda"));
        }
        if self.expert_top_p.is_some() && !cpu {
            return Err(crate::Error::Usage("--expert-top-p runs on the CPU only so far"));
        }
        let expert_top_p = match self.expert_top_p.map(tf_dsv41::TopP::new) {
            Some(Err(_)) => return Err(crate::Error::Usage("--expert-top-p takes a share in (0, 1], at least 0.001")),
            p => p.and_then(Result::ok),
        };
        let limits = Limits {
            max_lanes: self.max_lanes,
            max_step_lanes: self.max_step_lanes as usize,
            max_queue: self.max_queue,
            max_queued_tokens: self.max_queued_tokens,
            max_active_tokens: self.max_active_tokens.unwrap_or(usize::MAX),
            prefill_chunk: self.prefill_chunk,
            admission: match self.admission {
                AdmissionArg::Fifo => Admission::Fifo,
                AdmissionArg::ShortFirst => Admission::ShortFirst,
            },
            prefix_block: self.prefix_block,
            prefix_cache_tokens: self.prefix_cache_tokens,
            draft: !self.no_draft,
            draft_len: self.draft_len.map(usize::from),
        };
        Ok(ServeConfig {
            model_dir: self.model,
            host: self.host,
            port: self.port,
            api_key: self.api_key,
            limits,
            replay: !self.load.no_replay,
            device: self.device,
            engram_io,
            engram_cache_rows: self.engram_cache_rows,
            engram_from: self.load.engram_from,
            sequential_sums: self.sequential_sums,
            sequential_wo_a: self.sequential_wo_a,
            exl3_fast: self.exl3_kernels == Exl3Kernels::Fast,
            exl3_prompt_gemm,
            prefill_mxfp4,
            expert_top_p,
            cuda_graphs: self.cuda_graphs,
            tp: usize::from(self.tp),
            tp_deadline_ms: self.tp_deadline_ms,
            tp_split_heads: self.tp_split == TpSplitArg::Heads,
            tp_expert_width: self.tp_experts == TpExpertsArg::Width,
            tp_profile: self.tp_profile,
            tp_sp_rows: self.tp_sp_rows,
            tp_addr: self.tp_addr,
            tp_rank: usize::from(self.tp_rank),
            tp_nccl: self.tp_transport == TpTransportArg::Nccl,
        })
    }
}
