//! DSpark drafts on the GPU (dsv41 §11), the CPU's `model/dspark.rs` op for op: taps, ring seeds, draft blocks, Markov and confidence heads.

use super::lane::{GpuLane, copy};
use super::layer::{GAttn, GBlock};
use super::model::{Call, GStreams, GpuModel, Shared};
use super::ops::{self, Io, KeyRows, KeySource, key_id};
use super::weights::{Acts, Buf, Exl3Run, Lin8, Mat, upload_bf16};
use crate::config::RopeKind;
use crate::linear::Dense;
use crate::model::{DSparkHeads, Drafts};
use crate::plan::Part;
use tf_core::bf16;
use tf_cuda::{Error, Gpu};

/// The DSpark stages and heads on the GPU; the confidence head stays on the host, with a host copy of the Markov table for it.
pub struct GDSpark {
    pub stages: Vec<GBlock>,
    main_proj: Lin8,
    main_norm: Buf,
    norm: Buf,
    markov_embed: Vec<bf16>,
    /// The Markov table on the device, so a draft picks its tokens without a host round trip.
    markov_table: Buf,
    markov_head: Mat,
    confidence: Dense,
    rank: usize,
}

/// A tap: the newest rows (at most the window) of the streams entering a target layer, bf16 `[rows, hc, dim]`.
pub struct GTap {
    x: Buf,
    rows: usize,
}

impl GDSpark {
    pub fn upload(gpu: &'static Gpu, ds: DSparkHeads, kernels: Exl3Run) -> Result<GDSpark, Error> {
        Ok(GDSpark {
            stages: ds.stages.iter().map(|b| GBlock::upload(gpu, b, kernels)).collect::<Result<_, _>>()?,
            main_proj: Lin8::upload(gpu, &ds.main_proj, kernels)?,
            main_norm: upload_bf16(gpu, &ds.main_norm)?,
            norm: upload_bf16(gpu, &ds.norm)?,
            markov_head: Mat::upload(gpu, &ds.markov_head)?,
            markov_table: upload_bf16(gpu, &ds.markov_embed)?,
            markov_embed: ds.markov_embed,
            confidence: ds.confidence,
            rank: ds.rank,
        })
    }
}

impl GDSpark {
    /// Random heads around synthetic stages for flash-shaped benches; the host-side Markov table and confidence head come from `seed`.
    pub(crate) fn synthetic(
        gpu: &'static Gpu,
        stages: Vec<GBlock>,
        main_proj: Lin8,
        (main_norm, norm): (Buf, Buf),
        markov_head: Mat,
        cfg: &crate::Config,
        seed: u64,
    ) -> Result<GDSpark, Error> {
        let (rank, dim) = (cfg.dspark_markov_rank, cfg.dim);
        let mut rng = tf_core::rng::SplitMix64::new(seed);
        let mut uniform = |a: f32| ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a;
        let markov_embed: Vec<bf16> =
            (0..cfg.vocab_size * rank).map(|_| tf_core::formats::to_bf16(uniform(1.0))).collect();
        let a = (3.0 / (dim + rank) as f32).sqrt();
        let confidence = Dense { out: 1, inp: dim + rank, w: (0..dim + rank).map(|_| uniform(a)).collect() };
        let markov_table = upload_bf16(gpu, &markov_embed)?;
        Ok(GDSpark { stages, main_proj, main_norm, norm, markov_embed, markov_table, markov_head, confidence, rank })
    }
}

impl GpuModel {
    /// The tap of each part of `s` (`parts` rows each, in order): a copy of its newest rows, as many as the rings keep.
    pub(crate) fn tap_rows(&self, s: &GStreams, parts: &[usize]) -> Result<Option<Vec<GTap>>, Error> {
        if self.dspark.is_none() {
            return Ok(None);
        }
        let row = self.cfg.hc_mult * self.cfg.dim * 2;
        let mut end = 0;
        let mut taps = Vec::with_capacity(parts.len());
        for &n in parts {
            end += n;
            let rows = n.min(self.cfg.window_size);
            let mut x = self.gpu.pool().take(rows * row)?;
            copy(self.gpu, &s.x, (end - rows) * row, &mut x, 0, rows * row)?;
            taps.push(GTap { x, rows });
        }
        Ok(Some(taps))
    }

    /// Window K=V of rows at `positions` for a stage: `fp8(rope(kv_norm(wkv(x))))`, as `AttnWeights::window_kv`.
    pub(crate) fn window_kv(&self, a: &GAttn, x: &Acts<'_>, positions: &[usize]) -> Result<Buf, Error> {
        let (cfg, rows) = (self.cfg(), positions.len());
        let (d, rd) = (cfg.head_dim, cfg.rope_head_dim);
        let cs = self.gpu.upload(&ops::rope_table(self.rope(RopeKind::Plain), positions))?;
        let mut kv = self.norm(&a.wkv.forward(self.gpu, x)?, &a.kv_norm, rows, d)?;
        ops::rope(self.gpu, &mut kv.view_mut(), &cs.view(), (rows, 1, d, rd), false)?;
        ops::qdq_fp8_pow2(self.gpu, &mut kv.view_mut(), rows * d, 32)?;
        Ok(kv)
    }

    /// Seeds every stage's ring with the projected main rows at `pos0..pos0 + rows` (the newest `W`), from the taps.
    pub(crate) fn seed_rings(&self, lane: &mut GpuLane, pos0: usize, taps: &[GTap], rows: usize) -> Result<(), Error> {
        let (Some(ds), Some(first_tap)) = (&self.dspark, taps.first()) else { return Ok(()) };
        let (cfg, w) = (self.cfg(), self.cfg().window_size);
        let (hc, dim, n) = (cfg.hc_mult, cfg.dim, first_tap.rows.min(rows));
        let first = rows - n;
        // Each tap's stream means land in its columns of `hidden` on the device: no read-back, no host sync.
        let (row, width) = (hc * dim * 2, dim * taps.len());
        let mut hidden = self.gpu.pool().take(n * width * 2)?;
        for (i, t) in taps.iter().enumerate() {
            let x = t.x.view().slice((t.rows - n) * row..t.rows * row);
            let mut all = hidden.view_mut();
            ops::hc_mean(self.gpu, &x, &mut all.slice_mut(i * dim * 2..), (n, hc, dim, width))?;
        }
        let main = ds.main_proj.forward(self.gpu, &Acts::new(&hidden, n, dim * taps.len()))?;
        let main_x = self.norm(&main, &ds.main_norm, n, dim)?;
        let positions: Vec<usize> = (pos0 + first..pos0 + rows).collect();
        // Every stage's `wkv` reads the same rows: one quantization for all of them.
        let main_acts = Acts::new(&main_x, n, dim);
        let slots: Vec<i32> = positions.iter().map(|p| (p % w) as i32).collect();
        let slots = self.gpu.upload(&slots)?;
        for stage in &ds.stages {
            let kv = self.window_kv(&stage.attn, &main_acts, &positions)?;
            let ring = &mut lane.windows[stage.role.layer];
            ops::scatter_rows(self.gpu, &kv.view(), &mut ring.view_mut(), &slots.view(), (n, cfg.head_dim * 2, w))?;
        }
        Ok(())
    }

    /// Draft blocks' attention of several lanes (in order in `x`): keys are each lane's ring slots `0..min(W, pos0)` then its block rows, the CPU's `forward_draft` list.
    pub(crate) fn draft_attention(&self, a: &GAttn, x: &Buf, lanes: &[(&Call, &Buf)]) -> Result<Buf, Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let (heads, d, rd, w) = (a.heads, cfg.head_dim, cfg.rope_head_dim, cfg.window_size);
        let spans: Vec<(usize, usize)> = lanes.iter().map(|(c, _)| (c.pos0, c.rows)).collect();
        let rows: usize = spans.iter().map(|s| s.1).sum();
        let cs = self.lane_tables(lanes[0].0, &spans, RopeKind::Plain)?;
        // `wq_a` and `wkv` read the same rows: one quantization for both, as in `attn_front`.
        let xa = Acts::new(x, rows, cfg.dim);
        let qr = self.norm(&a.wq_a.forward(gpu, &xa)?, &a.q_norm, rows, cfg.q_lora_rank)?;
        let mut q = a.wq_b.forward(gpu, &Acts::new(&qr, rows, cfg.q_lora_rank))?;
        ops::rope(gpu, &mut q.view_mut(), &cs.view(), (rows, heads, d, rd), false)?;
        let positions: Vec<usize> = spans.iter().flat_map(|&(p, r)| p..p + r).collect();
        let kv = self.window_kv(a, &xa, &positions)?;
        let mut o = gpu.pool().take(rows * heads * d * 2)?;
        let empty = gpu.pool().take(2)?;
        let mut r0 = 0;
        for &(call, ring) in lanes {
            let n = call.rows;
            // The list the CPU builds, its first `w` ids in the window part and the rest as a selection: the same order, the same blocks.
            let list: Vec<i32> = (0..w.min(call.pos0))
                .map(|i| key_id(KeySource::Ring, i))
                .chain((0..n).map(|r| key_id(KeySource::Chunk, r)))
                .collect();
            let s = list.len().saturating_sub(w);
            let (mut window, mut sel) = (Vec::with_capacity(n * w), Vec::with_capacity(n * s));
            for _ in 0..n {
                window.extend((0..w).map(|j| list.get(j).copied().unwrap_or(ops::KEY_NONE)));
                sel.extend_from_slice(&list[w.min(list.len())..]);
            }
            let (window, sel) = (gpu.upload(&window)?, if s > 0 { Some(gpu.upload(&sel)?) } else { None });
            let (kc, kr, kl) = (kv.view().slice(r0 * d * 2..(r0 + n) * d * 2), ring.view(), empty.view());
            let keys = KeyRows { chunk: &kc, ring: &kr, latents: &kl };
            let (qs, sel_view) =
                (q.view().slice(r0 * heads * d * 2..(r0 + n) * heads * d * 2), sel.as_ref().map(|b| b.view()));
            let mut all = o.view_mut();
            let mut os = all.slice_mut(r0 * heads * d * 2..(r0 + n) * heads * d * 2);
            let dims = (n, heads, d, w, s);
            let scale = (d as f32).powf(-0.5);
            ops::sparse_attn(
                self.attn_path(),
                gpu,
                &qs,
                &keys,
                &window.view(),
                sel_view.as_ref(),
                &a.sink.view(),
                &mut os,
                dims,
                scale,
            )?;
            r0 += n;
        }
        ops::rope(gpu, &mut o.view_mut(), &cs.view(), (rows, heads, d, rd), true)?;
        let u = a.wo_a.forward(gpu, &o, Io::Bf16, Io::Bf16, rows, cfg.o_groups)?;
        a.wo_b.forward(gpu, &Acts::new(&u, rows, cfg.o_groups * cfg.o_lora_rank))
    }

    /// Drafts after the lane's newest row, given the token sampled for the next position (the CPU's `Model::draft`).
    pub fn draft(&self, lane: &mut GpuLane, next: u32) -> crate::plan::Result<Drafts> {
        Ok(self.draft_lanes(&mut [lane], &[next])?.remove(0))
    }

    /// [`GpuModel::draft`] of several lanes at once: the stages and heads run once over every lane's block, each lane's drafts as alone.
    pub fn draft_lanes(&self, lanes: &mut [&mut GpuLane], next: &[u32]) -> crate::plan::Result<Vec<Drafts>> {
        let Some(ds) = &self.dspark else {
            return Err(tf_core::Error::Invalid("this checkpoint has no DSpark stages".into()).into());
        };
        assert_eq!(lanes.len(), next.len(), "one next token per lane");
        if lanes.is_empty() {
            return Ok(Vec::new());
        }
        if lanes.iter().any(|l| l.pos == 0) {
            return Err(tf_core::Error::Invalid("draft needs a processed prompt".into()).into());
        }
        let (cfg, block, n) = (self.cfg(), self.cfg().dspark_block_size, lanes.len());
        let noise = cfg.dspark_noise_token_id;
        let ids: Vec<u32> =
            next.iter().flat_map(|&t| std::iter::once(t).chain(std::iter::repeat_n(noise, block - 1))).collect();
        let mut s = self.embed_rows(&ids)?;
        let mut run = || -> Result<Vec<Drafts>, Error> {
            let mut parts = Vec::with_capacity(n);
            for lane in lanes.iter_mut() {
                let (pos0, ctx) = (lane.pos, self.call(lane.pos, block, &[0])?);
                parts.push(Part { lane: &mut **lane, pos0, rows: block, ctx, shared: Shared::default() });
            }
            for stage in &ds.stages {
                self.block(stage, &mut s, &mut parts)?;
            }
            let (hc, dim, rank, rows) = (cfg.hc_mult, cfg.dim, ds.rank, n * block);
            let mut y = self.gpu.pool().take(rows * dim * 2)?;
            ops::hc_pre(self.gpu, &s.x.view(), &s.mix.view(), &mut y.view_mut(), (rows, hc, dim))?;
            let normed = self.norm(&y, &ds.norm, rows, dim)?;
            let local = self.head.forward(self.gpu, &normed, Io::Bf16, Io::F32, rows, 1)?;
            let host = if self.vocab.is_some() { Some(self.vocab_rows(&local, rows)?) } else { None };
            let y: Vec<u16> = self.gpu.download(&y)?;
            let vocab = cfg.vocab_size;
            let mut drafts = Vec::with_capacity(n);
            for (l, &t) in next.iter().enumerate() {
                let out = match &host {
                    None => self.markov_device(ds, &local, l * block, t, block)?,
                    Some(h) => self.markov_host(ds, &h[l * block * vocab..(l + 1) * block * vocab], t, block)?,
                };
                let mut confidence = Vec::with_capacity(block);
                for (i, &tok) in out[..block].iter().enumerate() {
                    let e = &ds.markov_embed[tok as usize * rank..(tok as usize + 1) * rank];
                    let r = (l * block + i) * dim;
                    let cat: Vec<f32> = y[r..r + dim]
                        .iter()
                        .map(|&b| bf16::from_bits(b).to_f32())
                        .chain(e.iter().map(|v| v.to_f32()))
                        .collect();
                    confidence.push(ds.confidence.forward_f32(&cat, 1)[0]);
                }
                drafts.push(Drafts { tokens: out[1..].to_vec(), confidence });
            }
            Ok(drafts)
        };
        Ok(run()?)
    }

    /// `[next, d1..d_block]` of the block at row `row0` of `logits`: each draft the argmax of its row plus the Markov head of the token before, read back once.
    fn markov_device(
        &self,
        ds: &GDSpark,
        logits: &Buf,
        row0: usize,
        next: u32,
        block: usize,
    ) -> Result<Vec<u32>, Error> {
        let (gpu, vocab, rank) = (self.gpu, self.cfg().vocab_size, ds.rank);
        let mut toks = gpu.upload(&vec![next as i32; block + 1])?;
        // One row buffer for every draft: stream order keeps each gather after the previous row's head read it.
        let mut e = gpu.pool().take(rank * 2)?;
        for i in 0..block {
            ops::embed_rows(
                gpu,
                &toks.view().slice(i * 4..(i + 1) * 4),
                &ds.markov_table.view(),
                &mut e.view_mut(),
                1,
                rank,
                1,
            )?;
            let bias = ds.markov_head.forward(gpu, &e, Io::Bf16, Io::F32, 1, 1)?;
            let row = logits.view().slice((row0 + i) * vocab * 4..(row0 + i + 1) * vocab * 4);
            let mut pick = toks.view_mut();
            ops::argmax_sum(gpu, &row, &bias.view(), &mut pick.slice_mut((i + 1) * 4..(i + 2) * 4), vocab)?;
        }
        Ok(gpu.download::<i32>(&toks)?.into_iter().map(|t| t as u32).collect())
    }

    /// As `markov_device` from logits on the host (a vocabulary split across ranks), a round trip per draft.
    fn markov_host(&self, ds: &GDSpark, logits: &[f32], next: u32, block: usize) -> Result<Vec<u32>, Error> {
        let (vocab, rank) = (self.cfg().vocab_size, ds.rank);
        let mut out = vec![next];
        for i in 0..block {
            let e = &ds.markov_embed[out[i] as usize * rank..(out[i] as usize + 1) * rank];
            let eb = self.gpu.upload_exact(&e.iter().map(|v| v.to_bits()).collect::<Vec<u16>>())?;
            let bias = self.vocab_rows(&ds.markov_head.forward(self.gpu, &eb, Io::Bf16, Io::F32, 1, 1)?, 1)?;
            let row: Vec<f32> = logits[i * vocab..(i + 1) * vocab].iter().zip(&bias).map(|(a, b)| a + b).collect();
            out.push(tf_core::ops::argmax(&row));
        }
        Ok(out)
    }
}
