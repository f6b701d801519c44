//! The whole dsv41 model on the CPU: weights by reference names, options, and the forward entry points.

mod block;
mod dspark;
mod forward;
pub(crate) mod prefetch;
mod rewind;

pub use block::{Block, BlockCall, LaneRows, Streams};
pub use dspark::{DSparkHeads, Drafts};
pub use prefetch::Prefetch;

use crate::attn::Quirks;
use crate::config::{Config, RopeKind, roles};
use crate::linear::{Dense, load_bf16_vec};
use crate::rope::Rope;
use crate::state::SeqState;
use std::path::Path;
use std::sync::Arc;
use tf_core::ops::qgemm::{expect_dtype, expect_shape};
use tf_core::{Checkpoint, DType, Error, Result, Tensor};
use tf_engram::{EngramConfig, NgramHasher, TokenMap};

/// Switches of the forward; the defaults are how the model is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// CED bounded replay (§7): decoder layers see only the last `window_size` prompt rows.
    pub replay: bool,
    pub quirks: Quirks,
    /// Engram rows from the mapped tensors (`None`) or from the shards through `tf_engram::FileTable` in this mode.
    pub engram_io: Option<tf_engram::IoMode>,
    /// Rows of each table read from disk kept decoded in host memory (`tf_engram::CachedTable`, 2·head_dim bytes each); 0: no cache.
    pub engram_cache_rows: usize,
    /// Another checkpoint (or folder of some of its shards) to take the Engram tables from, as an EXL3 checkpoint keeps none; `None`: this one, else `<dir>/engram`.
    pub engram_from: Option<&'static std::path::Path>,
    /// Off by default (`--sequential-sums`): RMSNorm and mHC's x² in index order, the contract before `SumOrder::Lanes32` (docs/numerics.md).
    pub sequential_sums: bool,
    /// Off by default (`--sequential-wo-a`): grouped `wo_a` in index order, the order before the 8-lane default (docs/numerics.md).
    pub sequential_wo_a: bool,
    /// Tier-2 switch, off by default (`--prefill-experts mxfp4`): MXFP4 copies of EXL3 routed experts for prompt chunks.
    pub prefill_mxfp4: Option<PrefillMxfp4>,
    /// Tier-2 numerics switch, off by default (`--exl3-kernels fast`): EXL3 on the GPU through tensor cores, within a declared bound.
    pub exl3_fast: bool,
    /// Tier-2 numerics switch, off by default (`--exl3-prompt gemm`): GPU calls of at least this many rows run EXL3 as an fp16 GEMM.
    pub exl3_prompt_gemm: Option<usize>,
    /// Expert parallel `(rank, world)`: this rank holds only its share of each backbone layer's routed experts (`tp::partition`).
    pub ep: Option<(usize, usize)>,
    /// With `ep`: each backbone layer's attention heads (whole `wo_a` groups) and `wo_b` rows split over the same ranks.
    pub split_heads: bool,
    /// With `ep`: every routed expert split by width (whole 32-blocks of its inner dimension) instead of whole experts per rank.
    pub expert_width: bool,
    /// With `ep`: calls of at least this many rows (prompt chunks) split their row-local projections over the ranks by rows; 0: off.
    pub sp_rows: usize,
    /// With `ep`: each rank writes every collective's ready and end times to `rank-<r>.jsonl` here (`tf_collective::Profiled`).
    pub tp_profile: Option<&'static Path>,
    /// CUDA: several lanes' sparse attention, indexer and ring writes in one launch each (on: same bits, checked on an H100; docs/perf-notes.md).
    pub joint_lanes: bool,
    /// CUDA: decode calls of few (row, head) pairs run sparse attention as `attn_scores`, `attn_softmax`, `attn_pv` (same bits); off until a GPU run checks it.
    pub split_attn: bool,
    /// CUDA: `hc_pre_norm` for the attention and FFN inputs and `hc_sinkhorn_warp4` at hc 4 (same bits); default [`FUSED_MHC`].
    pub fused_mhc: bool,
    /// CUDA: norms that feed FP8 linears write their output's FP8 codes in the same launch (same bits); default [`NORM_CODES`].
    pub norm_codes: bool,
    /// CUDA: calls averaging at least this many routed pairs per FP4 expert run them in tiles of one expert (same bits); 0: never.
    pub group_experts: usize,
    /// CUDA: calls averaging at least this many routed pairs per FP4 expert run tiles of 64 through the tiled kernel (same bits); 0: never.
    pub tiled_experts: usize,
    /// Tier-2 numerics switch, off by default (`--expert-top-p P`): a row skips its lightest routed experts past share P of its weight; CPU only.
    pub expert_top_p: Option<TopP>,
}

/// A routing-weight share for `Options::expert_top_p`, kept in thousandths so `Options` stays `Eq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopP(u16);

impl TopP {
    /// `p` in (0, 1], to the nearest thousandth; anything else is refused with the flag's name.
    pub fn new(p: f32) -> Result<TopP> {
        let t = (p * 1000.0).round();
        if !(p > 0.0 && p <= 1.0 && t >= 1.0) {
            return Err(Error::Invalid(format!("--expert-top-p {p}: a share in (0, 1], at least 0.001")));
        }
        Ok(TopP(t as u16))
    }

    pub fn share(self) -> f32 {
        f32::from(self.0) / 1000.0
    }
}

/// Which layers get MXFP4 prefill experts and which calls use them (TensorFold's TF_DS_PREFILL_MXFP4_LAYERS and MXFP4_MIN_ROWS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillMxfp4 {
    /// Layers `0..layers` of the encoder (clamped to its n_layers / 2).
    pub layers: usize,
    /// Calls with fewer rows (decode, short prompts) keep the EXL3 experts.
    pub min_rows: usize,
}

impl PrefillMxfp4 {
    /// TensorFold's adopted threshold: every encoder layer, chunks under 2048 rows (decode, verify windows, short prompts) keep EXL3.
    pub const DEFAULT: PrefillMxfp4 = PrefillMxfp4 { layers: usize::MAX, min_rows: 2048 };
}

/// Whether CUDA takes the fused mHC kernels (`Options::fused_mhc`) by default: off until a GPU run checks them.
pub const FUSED_MHC: bool = false;

/// Whether CUDA norms write their FP8 codes (`Options::norm_codes`) by default: off until a GPU run checks them.
pub const NORM_CODES: bool = false;

/// Rows from which a tensor-parallel call splits its row-local work by rows: above any verify window, so decode gathers nothing more.
pub const SP_ROWS: usize = 32;

/// Mean routed pairs per expert from which GPU calls group them (`Options::group_experts`): prompt chunks, not decode.
pub const GROUP_EXPERTS: usize = 4;

/// Mean routed pairs per expert from which GPU calls take tiles of 64 (`Options::tiled_experts`): a 2,048-row flash chunk's 32 (H100: 1.83× tiles of 8 there, 2.4× at 48).
pub const TILED_EXPERTS: usize = 32;

/// Rows from which EXL3 prompt calls take the GEMM by default: run 15 put the routed experts' crossover near 256 (docs/exl3.md).
pub const EXL3_PROMPT_MIN_ROWS: usize = 256;

impl Options {
    /// `self` taking the Engram tables from `dir` when given: the path lives for the process, so Options stays Copy.
    pub fn with_engram_from(self, dir: Option<&Path>) -> Options {
        let engram_from = dir.map(|d| &*Box::leak(d.to_path_buf().into_boxed_path())).or(self.engram_from);
        Options { engram_from, ..self }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            replay: true,
            quirks: Quirks::default(),
            engram_io: None,
            engram_cache_rows: 0,
            engram_from: None,
            sequential_sums: false,
            sequential_wo_a: false,
            prefill_mxfp4: None,
            exl3_fast: false,
            exl3_prompt_gemm: None,
            ep: None,
            split_heads: false,
            expert_width: false,
            sp_rows: SP_ROWS,
            tp_profile: None,
            joint_lanes: true,
            split_attn: false,
            fused_mhc: FUSED_MHC,
            norm_codes: NORM_CODES,
            group_experts: GROUP_EXPERTS,
            tiled_experts: TILED_EXPERTS,
            expert_top_p: None,
        }
    }
}

/// A loaded model: every backbone block, embedding, final norm, head and the Engram hasher.
pub struct Model {
    pub cfg: Config,
    pub blocks: Vec<Block>,
    pub embed: Tensor,
    pub norm: Vec<tf_core::bf16>,
    pub head: Dense,
    pub ropes: [Rope; 2],
    pub hasher: Option<NgramHasher>,
    pub dspark: Option<DSparkHeads>,
    pub opts: Options,
    /// With `ep` and `split_heads`: this rank's share of the vocabulary (the embedding, head and Markov head rows it holds).
    pub vocab: Option<crate::tp::TableSplit>,
}

/// The file a checkpoint may carry with its own compressed token map (LE u32 per token id).
pub const TOKEN_MAP_FILE: &str = "engram_token_map.u32";

fn token_map(dir: &Path, cfg: &Config) -> Result<TokenMap> {
    let local = dir.join(TOKEN_MAP_FILE);
    let map = if local.is_file() {
        TokenMap::open(&local)
    } else if cfg.vocab_size == tf_engram::DEEPSEEK_V4_VOCAB {
        TokenMap::deepseek_v4()
    } else {
        return Err(Error::Invalid(format!(
            "{}: missing, and vocab {} is not DeepSeek-V4's",
            local.display(),
            cfg.vocab_size
        )));
    };
    map.map_err(|e| Error::Invalid(format!("engram token map: {e}")))
}

impl Model {
    /// Loads config, weights and tokenizer-derived tables from a checkpoint directory.
    pub fn load(dir: &Path, opts: Options) -> Result<Model> {
        let cfg = Config::load(dir).map_err(|e| Error::Invalid(format!("{}: {e}", dir.display())))?;
        let ck = Checkpoint::open(dir)?;
        Model::from_checkpoint(&ck, cfg, dir, opts)
    }

    pub fn from_checkpoint(ck: &Checkpoint, mut cfg: Config, dir: &Path, opts: Options) -> Result<Model> {
        if opts.sequential_sums {
            cfg.sums = tf_core::ops::SumOrder::Sequential;
        }
        cfg.wo_a_lanes8 = !opts.sequential_wo_a;
        let split = cfg.n_layers / 2;
        if opts.replay && cfg.kv_source_layers.iter().any(|&s| s > split) {
            return Err(Error::Invalid(
                "bounded replay needs layer n_layers/2 to be the decoder's only KV source; load with replay off".into(),
            ));
        }
        if opts.replay && cfg.dspark_target_layer_ids.iter().any(|&l| l < split) {
            return Err(Error::Invalid("bounded replay needs DSpark taps in the decoder; load with replay off".into()));
        }
        let hasher = if cfg.engram_layer_ids.is_empty() {
            None
        } else {
            let ec = EngramConfig {
                layer_ids: cfg.engram_layer_ids.clone(),
                num_embeddings: cfg.engram_num_embeddings.clone(),
                max_ngram_size: cfg.engram_max_ngram_size,
                vocab_size: cfg.engram_vocab_size,
                n_heads: cfg.engram_n_heads,
                pad_id: cfg.engram_pad_id,
                compressed_vocab_size: cfg.engram_compressed_vocab_size as u32,
            };
            Some(
                NgramHasher::new(&ec, Arc::new(token_map(dir, &cfg)?))
                    .map_err(|e| Error::Invalid(format!("engram: {e}")))?,
            )
        };
        let cols = hasher.as_ref().map_or(0, |h| h.layout().cols());
        // The tables: --engram-from, else this checkpoint's own, else TensorFold's $TF_DSV41_ENGRAM_DIR or `<dir>/engram` (the original shards 47-48).
        let own = cfg.engram_layer_ids.first().is_none_or(|l| ck.contains(&format!("layers.{l}.engram.embed.weight")));
        let source = match opts.engram_from {
            Some(p) => Some(p.to_path_buf()),
            None if own => None,
            None => std::env::var_os("TF_DSV41_ENGRAM_DIR")
                .map(std::path::PathBuf::from)
                .or_else(|| Some(dir.join("engram")).filter(|d| d.is_dir())),
        };
        let from = source.filter(|_| hasher.is_some()).map(Checkpoint::open_present).transpose()?;
        let engram = (from.as_ref().unwrap_or(ck), opts.engram_io.map(|m| (m, opts.engram_cache_rows)));
        let all = roles(&cfg);
        let mut blocks = all[..cfg.n_layers]
            .iter()
            .map(|r| Block::load(ck, &cfg, r, cols, engram, opts.ep.filter(|_| !opts.expert_width)))
            .collect::<Result<Vec<_>>>()?;
        if let (Some((rank, world)), true) = (opts.ep, opts.expert_width) {
            for b in &mut blocks {
                b.ffn.split_width(rank, world, &format!("layers.{}.", b.role.layer))?;
            }
        }
        if let (Some((rank, world)), true) = (opts.ep, opts.split_heads) {
            for b in &mut blocks {
                b.attn.split_heads(rank, world, &format!("layers.{}.", b.role.layer))?;
                if let Some(g) = &mut b.engram {
                    g.split = Some(crate::tp::TableSplit::new(g.table.rows() as usize, rank, world));
                }
            }
        }
        if let Some(p) = opts.expert_top_p {
            blocks.iter_mut().for_each(|b| b.ffn.top_p = Some(p.share()));
        }
        if let Some(p) = opts.prefill_mxfp4 {
            for b in blocks.iter_mut().take(p.layers.min(cfg.n_layers / 2)) {
                if !b.ffn.add_mxfp4_prefill(p.min_rows)? {
                    return Err(Error::Invalid(format!(
                        "--prefill-experts mxfp4: layer {}'s routed experts are not EXL3 (they are MXFP4 already)",
                        b.role.layer
                    )));
                }
            }
        }
        let dspark = if cfg.n_mtp_layers > 0 && cfg.dspark_block_size > 0 {
            let stages = all[cfg.n_layers..]
                .iter()
                .map(|r| Block::load(ck, &cfg, r, cols, engram, None))
                .collect::<Result<Vec<_>>>()?;
            Some(DSparkHeads::load(ck, &cfg, stages)?)
        } else {
            None
        };
        let vocab = opts.ep.filter(|_| opts.split_heads).map(|(r, w)| crate::tp::TableSplit::new(cfg.vocab_size, r, w));
        let mut head = load_head(ck, &cfg)?;
        let mut dspark = dspark;
        if let Some(v) = &vocab {
            head = v.narrow(&head);
            if let Some(ds) = &mut dspark {
                ds.markov_head = v.narrow(&ds.markov_head);
            }
        }
        let embed = ck.get("embed.weight")?;
        expect_dtype("embed.weight", &embed, &[DType::BF16])?;
        expect_shape("embed.weight", &embed, &[cfg.vocab_size, cfg.dim])?;
        Ok(Model {
            norm: load_bf16_vec(ck, "norm.weight", cfg.dim)?,
            head,
            ropes: [Rope::new(&cfg, RopeKind::Plain), Rope::new(&cfg, RopeKind::Yarn)],
            blocks,
            embed,
            hasher,
            dspark,
            opts,
            vocab,
            cfg,
        })
    }

    /// A fresh sequence.
    pub fn new_state(&self) -> SeqState {
        let mut st = SeqState::new(self.cfg.total_layers(), self.cfg.window_size, &self.cfg.kv_source_layers);
        st.engram = self.hasher.as_ref().map(NgramHasher::history);
        st
    }

    pub(crate) fn rope(&self, kind: RopeKind) -> &Rope {
        match kind {
            RopeKind::Plain => &self.ropes[0],
            RopeKind::Yarn => &self.ropes[1],
        }
    }
}

/// The head: bf16 `head.weight`, or TensorFold's published EXL3 `head.{trellis,…}` run as its effective f32 matrix.
fn load_head(ck: &Checkpoint, cfg: &Config) -> Result<Dense> {
    match crate::qlinear::exl3_dense(ck, "head", cfg.vocab_size, cfg.dim)? {
        Some(head) => Ok(head),
        None => Dense::load(ck, "head.weight", cfg.vocab_size, cfg.dim),
    }
}
