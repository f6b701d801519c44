//! The dsv41 model on one GPU: the CPU model's weights uploaded once, lanes on the device, blocks run op by op.

use super::lane::{GCache, GpuLane};
use super::layer::GBlock;
use super::ops::{self, Io};
use super::weights::{Acts, Buf, Exl3Run, Mat, Normed, upload_bf16};
use crate::config::{Config, RopeKind};
use crate::model::{Model, Options};
use crate::plan::Part;
use crate::rope::Rope;
use std::collections::HashMap;
use std::path::Path;
use tf_cuda::{Error, Gpu};
use tf_exl3::exl3_mma::Exl3Kernels;

/// A model on a GPU: weights uploaded once; the Engram hasher and tables stay on the host, moved from the loaded CPU model.
pub struct GpuModel {
    pub gpu: &'static Gpu,
    pub cfg: Config,
    pub ropes: [Rope; 2],
    pub hasher: Option<tf_engram::NgramHasher>,
    /// Per backbone layer, the host Engram gate whose table rows the GPU gathers (its projection runs from `blocks`).
    pub engram_tables: Vec<Option<crate::engram::EngramGate>>,
    pub blocks: Vec<GBlock>,
    pub embed: Buf,
    pub norm: Buf,
    pub head: Mat,
    pub opts: Options,
    /// When `Some`, every MoE call appends its routed expert ids (a bench counts the expert bytes it touched).
    pub route_log: parking_lot::Mutex<Option<Vec<Vec<i32>>>>,
    /// When `Some`, phases run between syncs and add (host enqueue s, total s, calls) under their name: the bench's breakdown.
    pub profile: parking_lot::Mutex<Option<Profile>>,
    /// Decode steps run as one CUDA graph each (`Gpu::replay`), after a first step of each row count runs directly.
    pub graphs: bool,
    pub(crate) graph_warm: parking_lot::Mutex<std::collections::HashSet<usize>>,
    /// Pinned buffers each layer's Engram rows are gathered into, then copied once per layer per call.
    pub(crate) engram_staging: tf_cuda::pinned::PinnedRing,
    /// The DSpark stages and heads, when the checkpoint has them.
    pub dspark: Option<super::dspark::GDSpark>,
    /// Tensor parallel with heads split: this rank's share of the vocabulary (its head and Markov head rows; the embedding stays whole).
    pub vocab: Option<crate::tp::TableSplit>,
}

/// Per phase name: host enqueue seconds, total seconds, calls.
pub type Profile = std::collections::BTreeMap<&'static str, (f64, f64, usize)>;

/// What one forward call shares across its blocks.
pub struct Call {
    pub pos0: usize,
    pub rows: usize,
    /// RoPE (cos, sin) of each row's position, per table kind (plain, YaRN).
    pub tables: [Buf; 2],
    pub run_compressor: bool,
    /// Window key ids per distinct window floor, and each row's ring slot (−1: not kept): the same for every layer.
    pub windows: Vec<(usize, Buf)>,
    pub slots: Buf,
    /// `slots` on the host, for launches that write several lanes' rings at once.
    pub slot_ids: Vec<i32>,
    /// The first lane of a shared step keeps every lane's (position, rows) and RoPE tables here, built once per step.
    pub lanes_cs: std::cell::OnceCell<LaneTables>,
}

/// Every lane's (first position, rows) in a shared step, and their RoPE tables (plain, YaRN) one after another.
pub type LaneTables = (Vec<(usize, usize)>, [Buf; 2]);

impl Call {
    pub fn window(&self, floor: usize) -> &Buf {
        &self.windows.iter().find(|(f, _)| *f == floor).expect("Call::new saw every layer's floor").1
    }

    pub fn cs(&self, kind: RopeKind) -> &Buf {
        match kind {
            RopeKind::Plain => &self.tables[0],
            RopeKind::Yarn => &self.tables[1],
        }
    }
}

/// Selections and the candidate mask that index sources hand to later layers in the same forward.
#[derive(Default)]
pub struct Shared {
    pub sel: HashMap<usize, Buf>,
    pub candidates: Option<(Buf, usize)>,
}

/// Rows moving through the stack on the GPU: bf16 `[rows, hc·dim]` and each row's last mix (its `pre` comes first).
pub struct GStreams {
    pub x: Buf,
    pub mix: Buf,
    pub rows: usize,
}

/// Opens GPU `ordinal` once for the life of the process (models and lanes borrow it for as long).
pub fn open_gpu(ordinal: usize) -> Result<&'static Gpu, Error> {
    Ok(Box::leak(Box::new(Gpu::open(ordinal)?)))
}

/// The model's bookkeeping locks (profile, route log, warm shapes): parking_lot's, which have no poison to ignore.
pub(crate) fn unlocked<T>(m: &parking_lot::Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

/// Refuses the switches the GPU forward does not have yet, before any weight is read or uploaded.
fn cpu_only(opts: &Options) -> Result<(), crate::Error> {
    if opts.expert_top_p.is_some() {
        return Err(crate::Error::Refused("--expert-top-p runs on the CPU only so far (issue 24, item 5)".into()));
    }
    Ok(())
}

/// The forward's steps still return tf-core's error (until the one forward plan returns `crate::Error`).
impl GpuModel {
    /// Loads a checkpoint on the CPU, then uploads every backbone weight to `gpu`.
    pub fn load(dir: &Path, opts: Options, gpu: &'static Gpu) -> Result<GpuModel, crate::Error> {
        cpu_only(&opts)?;
        let cpu = crate::family::load_dsv41(dir, opts)?;
        Ok(GpuModel::from_cpu(cpu, gpu)?)
    }

    /// A tensor-parallel rank loaded on the host (`tp::load_rank`), uploaded to GPU `ordinal` (`graphs`: CUDA graph decode steps).
    pub fn upload_rank(cpu: Model, ordinal: usize, graphs: bool) -> Result<GpuModel, crate::Error> {
        // A rank's MoE and split layers gather through the host, which a captured step cannot; the EXL3 GEMM picks by a rank's pair count.
        cpu_only(&cpu.opts)?;
        if graphs || cpu.opts.exl3_prompt_gemm.is_some() {
            let what = "GPU tensor-parallel ranks run without --cuda-graphs and --exl3-prompt gemm for now";
            return Err(crate::Error::Refused(what.into()));
        }
        let gpu = open_gpu(ordinal).map_err(|source| crate::Error::OpenGpu { ordinal, source })?;
        let mut model = GpuModel::from_cpu(cpu, gpu)?;
        model.graphs = graphs;
        Ok(model)
    }

    /// Uploads `cpu`'s weights and keeps only its Engram hasher and tables; the host model is dropped.
    pub fn from_cpu(mut cpu: Model, gpu: &'static Gpu) -> Result<GpuModel, Error> {
        let gemv = if cpu.opts.exl3_fast { Exl3Kernels::Fast } else { Exl3Kernels::Exact };
        let kernels = Exl3Run { kernels: gemv, prompt_rows: cpu.opts.exl3_prompt_gemm };
        let blocks = cpu.blocks.iter().map(|b| GBlock::upload(gpu, b, kernels)).collect::<Result<Vec<_>, _>>()?;
        let embed = gpu.upload_exact(cpu.embed.bytes())?;
        let norm = upload_bf16(gpu, &cpu.norm)?;
        let head = Mat::upload(gpu, &cpu.head)?;
        let dspark = cpu.dspark.take().map(|ds| super::dspark::GDSpark::upload(gpu, ds, kernels)).transpose()?;
        gpu.sync("uploading the model")?;
        let ropes = [Rope::new(&cpu.cfg, RopeKind::Plain), Rope::new(&cpu.cfg, RopeKind::Yarn)];
        Ok(GpuModel {
            gpu,
            cfg: cpu.cfg.clone(),
            ropes,
            opts: cpu.opts,
            blocks,
            embed,
            norm,
            head,
            hasher: cpu.hasher.take(),
            engram_tables: cpu.blocks.iter_mut().map(|b| b.engram.take()).collect(),
            route_log: Default::default(),
            profile: Default::default(),
            graphs: false,
            graph_warm: Default::default(),
            engram_staging: Default::default(),
            dspark,
            vocab: cpu.vocab.take(),
        })
    }

    /// Runs `f`; with profiling on, between two syncs, adding its host enqueue time and total time under `name`.
    pub(crate) fn phase<T>(&self, name: &'static str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        if unlocked(&self.profile).is_none() {
            return f();
        }
        self.gpu.sync(name)?;
        let t = std::time::Instant::now();
        let r = f()?;
        let host = t.elapsed().as_secs_f64();
        self.gpu.sync(name)?;
        let total = t.elapsed().as_secs_f64();
        if let Some(map) = unlocked(&self.profile).as_mut() {
            let e = map.entry(name).or_default();
            *e = (e.0 + host, e.1 + total, e.2 + 1);
        }
        Ok(r)
    }

    pub fn cfg(&self) -> &Config {
        &self.cfg
    }

    pub(crate) fn rope(&self, kind: RopeKind) -> &Rope {
        match kind {
            RopeKind::Plain => &self.ropes[0],
            RopeKind::Yarn => &self.ropes[1],
        }
    }

    /// The Engram hasher of a loaded model with Engram layers.
    pub(crate) fn hasher(&self) -> Option<&tf_engram::NgramHasher> {
        self.hasher.as_ref()
    }

    /// Starts the Engram read-ahead of `prompt`'s chunks after `hist` (a lane's history), as [`Model::prefetch_after`].
    pub fn prefetch_after(
        &self,
        hist: Option<&tf_engram::NgramHistory>,
        prompt: &[u32],
        lens: &[usize],
        ahead: (usize, usize),
    ) -> crate::plan::Result<Option<crate::model::Prefetch>> {
        crate::plan::Backend::prefetch_after(self, hist, prompt, lens, ahead)
    }

    /// A fresh sequence with its rings and caches on the GPU.
    pub fn new_lane(&self) -> Result<GpuLane, Error> {
        let cfg = self.cfg();
        let layers = cfg.n_layers;
        let mut compressed = Vec::with_capacity(layers);
        for b in &self.blocks {
            compressed.push(if b.role.is_kv_source {
                let index_dim =
                    b.attn.compressor.as_ref().and_then(|c| c.index_wk.as_ref()).map(|_| cfg.index_head_dim);
                Some(GCache::new(self.gpu, b.role.ratio, cfg.head_dim, index_dim)?)
            } else {
                None
            });
        }
        let ring = cfg.window_size * cfg.head_dim * 2;
        // DSpark stages keep their rings after the backbone's, at their own layer ids.
        let rings = if self.dspark.is_some() { cfg.total_layers() } else { layers };
        Ok(GpuLane {
            pos: 0,
            windows: (0..rings).map(|_| self.gpu.pool().take(ring)).collect::<Result<_, _>>()?,
            window_floor: vec![0; layers],
            compressed,
            last_key_publisher: None,
            engram: self.hasher().map(tf_engram::NgramHasher::history),
            replay: None,
            undo: None,
        })
    }

    /// The call context of `rows` rows from `pos0` for layers with these window floors: RoPE tables, window ids, ring slots.
    pub(crate) fn call(&self, pos0: usize, rows: usize, floors: &[usize]) -> Result<Call, Error> {
        let positions: Vec<usize> = (pos0..pos0 + rows).collect();
        let table = |k| self.gpu.upload(&ops::rope_table(self.rope(k), &positions));
        let w = self.cfg.window_size;
        let mut windows: Vec<(usize, Buf)> = Vec::new();
        for &f in floors {
            if !windows.iter().any(|(g, _)| *g == f) {
                windows.push((f, self.gpu.upload(&super::attn::window_ids(pos0, rows, w, f))?));
            }
        }
        let first = rows.saturating_sub(w);
        let slots: Vec<i32> = (0..rows).map(|r| if r >= first { ((pos0 + r) % w) as i32 } else { -1 }).collect();
        Ok(Call {
            pos0,
            rows,
            tables: [table(RopeKind::Plain)?, table(RopeKind::Yarn)?],
            run_compressor: true,
            windows,
            slots: self.gpu.upload(&slots)?,
            slot_ids: slots,
            lanes_cs: std::cell::OnceCell::new(),
        })
    }

    /// Embeds token ids into `hc` equal streams with the one-hot pre-mix; ids are checked against the vocab first.
    pub(crate) fn embed_rows(&self, tokens: &[u32]) -> crate::plan::Result<GStreams> {
        let cfg = self.cfg();
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            let msg = format!("token id {t} is outside the vocabulary of {}", cfg.vocab_size);
            return Err(tf_core::Error::Invalid(msg).into());
        }
        let (hc, dim, rows) = (cfg.hc_mult, cfg.dim, tokens.len());
        let run = || -> Result<GStreams, Error> {
            let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
            let ids = self.gpu.upload(&ids)?;
            let mut x = self.gpu.pool().take(rows * hc * dim * 2)?;
            ops::embed_rows(self.gpu, &ids.view(), &self.embed.view(), &mut x.view_mut(), rows, dim, hc)?;
            let width = (2 + hc) * hc;
            let mut mix = vec![0.0f32; rows * width];
            mix.chunks_exact_mut(width).for_each(|m| m[0] = 1.0);
            Ok(GStreams { x, mix: self.gpu.upload(&mix)?, rows })
        };
        Ok(run()?)
    }

    /// f32 logits of every row of the streams (`head(norm(hc_pre(X, pre)))`), on the GPU: this rank's vocabulary share under a split.
    pub(crate) fn head_rows(&self, s: &GStreams) -> Result<Buf, Error> {
        let normed = self.pre_norm(&s.x, &s.mix, &self.norm, s.rows, false)?.x;
        self.phase("head", || self.head.forward(self.gpu, &normed, Io::Bf16, Io::F32, s.rows, 1))
    }

    /// [`GpuModel::head_rows`] downloaded, a vector per row (under a vocabulary split, every rank's share gathered here).
    pub(crate) fn split_logits(&self, logits: &Buf) -> Result<Vec<Vec<f32>>, Error> {
        let vocab = self.cfg().vocab_size;
        let share = self.vocab.as_ref().map_or(vocab, |t| t.mine().len());
        let all = self.vocab_rows(logits, logits.len() / 4 / share.max(1))?;
        Ok(all.chunks_exact(vocab).map(<[f32]>::to_vec).collect())
    }

    #[cfg(feature = "testkit")]
    pub(crate) fn logits(&self, s: &GStreams) -> Result<Vec<Vec<f32>>, Error> {
        self.split_logits(&self.head_rows(s)?)
    }

    /// Adds this layer's Engram to the streams: rows gathered on the host straight into pinned staging (from `ahead` when fetched ahead), one copy, projected and gated on the GPU.
    pub(crate) fn apply_engram(
        &self,
        b: &GBlock,
        s: &mut GStreams,
        ids: Option<&[Vec<u64>]>,
        ahead: Option<&tf_engram::ChunkRows>,
    ) -> crate::plan::Result<()> {
        let cpu = self.engram_tables.get(b.role.layer).and_then(Option::as_ref);
        let (Some(g), Some(ids), Some(cpu)) = (&b.engram, ids, cpu) else {
            return Ok(());
        };
        let cfg = self.cfg();
        let width = ids[0].len() * cpu.table.dim();
        let mut staged = self.engram_staging.stage(self.gpu, s.rows * width * 2)?;
        cpu.gather_rows_into(ids, ahead, bytemuck::cast_slice_mut(staged.bytes()))?;
        let run = || -> Result<(), Error> {
            let ed = staged.upload()?;
            let kv = g.wkv.forward_f32(self.gpu, &Acts::new(&ed, s.rows, width))?;
            ops::engram_gate(
                self.gpu,
                &mut s.x.view_mut(),
                &kv.view(),
                &g.weight.view(),
                (s.rows, cfg.hc_mult, cfg.dim),
                cfg.norm_eps,
            )
        };
        Ok(run()?)
    }

    /// Attention then MoE between hc collapse and expand, on `s` in place (the CPU's `Block::forward`).
    pub(crate) fn block(&self, b: &GBlock, s: &mut GStreams, parts: &mut [Part<'_, GpuModel>]) -> Result<(), Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let (hc, dim, rows) = (cfg.hc_mult, cfg.dim, s.rows);
        let mix_a = self.phase("mhc mixes", || self.mixes(&b.hc_attn, &s.x, rows))?;
        let a_in = self.phase("hc_pre + norm", || self.attn_input(b, s, true))?;
        let a = self.phase("attention", || match parts {
            [p] => self.attention(&b.attn, &b.role, &a_in, &p.ctx, p.lane, &mut p.shared),
            parts => self.attention_lanes(&b.attn, &b.role, &a_in, parts),
        })?;
        let mut x = gpu.pool().take(rows * hc * dim * 2)?;
        self.phase("hc_post", || {
            ops::hc_post(gpu, &a.view(), &s.x.view(), &mix_a.view(), &mut x.view_mut(), (rows, hc, dim))
        })?;
        let mix_f = self.phase("mhc mixes", || self.mixes(&b.hc_ffn, &x, rows))?;
        let codes = b.ffn.reads_codes();
        let f_in = self.phase("hc_pre + norm", || self.pre_norm(&x, &mix_a, &b.ffn_norm, rows, codes))?;
        let f = self.phase("moe", || self.moe(&b.ffn, &f_in, rows))?;
        self.phase("hc_post", || {
            ops::hc_post(gpu, &f.view(), &x.view(), &mix_f.view(), &mut s.x.view_mut(), (rows, hc, dim))
        })?;
        s.mix = mix_f;
        Ok(())
    }

    /// The normed attention input of every row: `attn_norm(hc_pre(X, pre))`, with codes where `wq_a` and `wkv` read them (`front`: the call runs them).
    pub(crate) fn attn_input(&self, b: &GBlock, s: &GStreams, front: bool) -> Result<Normed, Error> {
        let codes = front && !b.role.is_dspark && (b.attn.wq_a.is_fp8() || b.attn.wkv.is_fp8());
        self.pre_norm(&s.x, &s.mix, &b.attn_norm, s.rows, codes)
    }

    /// `norm(hc_pre(x, pre))` of `rows` rows, in one `hc_pre_norm` launch with `Options::fused_mhc`; `codes` as [`GpuModel::norm_rows`].
    fn pre_norm(&self, x: &Buf, mix: &Buf, w: &Buf, rows: usize, codes: bool) -> Result<Normed, Error> {
        let cfg = self.cfg();
        let (hc, dim) = (cfg.hc_mult, cfg.dim);
        let mut y = self.gpu.pool().take(rows * dim * 2)?;
        if !self.opts.fused_mhc {
            ops::hc_pre(self.gpu, &x.view(), &mix.view(), &mut y.view_mut(), (rows, hc, dim))?;
            return self.norm_rows(&y, w, (rows, dim), codes);
        }
        let mut fp8 = self.code_bufs(rows, dim, codes)?;
        let out = fp8.as_mut().map(|(c, s)| ops::Codes { codes: c.view_mut(), scales: s.view_mut() });
        let (xv, mv, wv) = (x.view(), mix.view(), w.view());
        ops::hc_pre_norm(self.gpu, &xv, &mv, &wv, &mut y.view_mut(), out, (rows, hc, dim), cfg.norm())?;
        Ok(Normed { x: y, rows, k: dim, fp8 })
    }

    pub(crate) fn mixes(&self, site: &super::layer::GHc, x: &Buf, rows: usize) -> Result<Buf, Error> {
        let cfg = self.cfg();
        let hc = cfg.hc_mult;
        let mut mix = self.gpu.pool().take(rows * (2 + hc) * hc * 4)?;
        let sinkhorn = ops::Sinkhorn { iters: cfg.hc_sinkhorn_iters, eps: cfg.hc_eps, hc4: self.opts.fused_mhc };
        ops::hc_mixes(
            self.gpu,
            &x.view(),
            &site.func.view(),
            &site.scale.view(),
            &site.base.view(),
            &mut mix.view_mut(),
            (rows, hc, cfg.dim),
            sinkhorn,
            cfg.norm(),
        )?;
        Ok(mix)
    }
}
