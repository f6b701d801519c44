//! CSA2 attention on the GPU (dsv41 §6), the CPU's `AttnWeights::forward` op for op.

use super::lane::GpuLane;
use super::layer::GAttn;
use super::model::{Call, GpuModel, Shared};
use super::ops::{self, Io, KeyRows, KeySource, key_id};
use super::weights::{Acts, Buf};
use crate::config::{AttnMode, LayerRole};
use tf_core::formats::Fp4Scale;
use tf_cuda::Error;

impl GpuModel {
    /// RMSNorm of `rows` bf16 rows of `dim` into a new buffer.
    pub(crate) fn norm(&self, x: &Buf, w: &Buf, rows: usize, dim: usize) -> Result<Buf, Error> {
        let mut y = self.gpu.pool().take(rows * dim * 2)?;
        ops::rms_norm(self.gpu, &x.view(), &w.view(), &mut y.view_mut(), rows, dim, self.cfg().norm())?;
        Ok(y)
    }

    /// Attention over the call's rows (`x` normed, bf16 `[rows, dim]`); updates the lane's caches, returns bf16 `[rows, dim]`.
    pub(crate) fn attention(
        &self,
        a: &GAttn,
        role: &LayerRole,
        x: &Buf,
        call: &Call,
        lane: &mut GpuLane,
        shared: &mut Shared,
    ) -> Result<Buf, Error> {
        if role.is_dspark {
            return self.draft_attention(a, x, call, &lane.windows[role.layer]);
        }
        let front = self.phase("attn: q, kv", || self.attn_front(a, x, call.rows))?;
        let o = self.attn_core(a, role, x, front, call, lane, shared)?;
        self.attn_output(a, o.as_ref(), call.rows)
    }

    /// [`GpuModel::attention`] of several lanes' rows (in order in `x`): projections once over every row, the rest per lane.
    pub(crate) fn attention_lanes(
        &self,
        a: &GAttn,
        role: &LayerRole,
        x: &Buf,
        parts: &mut [crate::plan::Part<'_, GpuModel>],
    ) -> Result<Buf, Error> {
        if role.is_dspark {
            let what = "DSpark stages draft one lane at a time".into();
            return Err(Error::Launch { op: "attention of several lanes", what });
        }
        let (gpu, cfg) = (self.gpu, self.cfg());
        let rows: usize = parts.iter().map(|p| p.rows).sum();
        let (qr, q, kv) = self.phase("attn: q, kv", || self.attn_front(a, x, rows))?;
        let (d, heads) = (cfg.head_dim, a.heads);
        let widths = [cfg.dim * 2, cfg.q_lora_rank * 2, heads * d * 2, d * 2];
        let mut o = match heads {
            0 => None,
            _ => Some(gpu.pool().take(rows * heads * d * 2)?),
        };
        let mut at = 0;
        for p in parts.iter_mut() {
            // This lane's rows of each projection, copied out on the device.
            let part = |b: &Buf, w: usize| -> Result<Buf, Error> {
                let mut out = gpu.pool().take(p.rows * w)?;
                super::lane::copy(gpu, b, at * w, &mut out, 0, p.rows * w)?;
                Ok(out)
            };
            let xl = part(x, widths[0])?;
            let front =
                (part(&qr, widths[1])?, q.as_ref().map(|q| part(q, widths[2])).transpose()?, part(&kv, widths[3])?);
            let ol = self.attn_core(a, role, &xl, front, &p.ctx, p.lane, &mut p.shared)?;
            if let (Some(ol), Some(o)) = (ol, o.as_mut()) {
                super::lane::copy(gpu, &ol, 0, o, at * widths[2], p.rows * widths[2])?;
            }
            at += p.rows;
        }
        self.attn_output(a, o.as_ref(), rows)
    }

    /// The row-wise front of attention: normed low-rank query, the query (none on a rank without heads), normed KV; no RoPE yet.
    fn attn_front(&self, a: &GAttn, x: &Buf, rows: usize) -> Result<(Buf, Option<Buf>, Buf), Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let xq = Acts::new(x, rows, cfg.dim);
        let qr = self.norm(&a.wq_a.forward(gpu, &xq)?, &a.q_norm, rows, cfg.q_lora_rank)?;
        // A tensor-parallel rank without heads runs no query (its share of the outputs is empty).
        let q = match a.heads {
            0 => None,
            _ => Some(a.wq_b.forward(gpu, &Acts::new(&qr, rows, cfg.q_lora_rank))?),
        };
        let kv = self.norm(&a.wkv.forward(gpu, &xq)?, &a.kv_norm, rows, cfg.head_dim)?;
        Ok((qr, q, kv))
    }

    /// One lane's attention after the front: RoPE, compressor and indexer, sparse attention, the window write; `o` before `wo_a`.
    #[allow(clippy::too_many_arguments)]
    fn attn_core(
        &self,
        a: &GAttn,
        role: &LayerRole,
        x: &Buf,
        (qr, mut q, mut kv): (Buf, Option<Buf>, Buf),
        call: &Call,
        lane: &mut GpuLane,
        shared: &mut Shared,
    ) -> Result<Option<Buf>, Error> {
        let (gpu, cfg, rows) = (self.gpu, self.cfg(), call.rows);
        let (heads, d, rd, w) = (a.heads, cfg.head_dim, cfg.rope_head_dim, cfg.window_size);
        let cs = call.cs(role.rope);
        self.phase("attn: rope", || {
            if let Some(q) = q.as_mut() {
                ops::rope(gpu, &mut q.view_mut(), &cs.view(), (rows, heads, d, rd), false)?;
            }
            ops::rope(gpu, &mut kv.view_mut(), &cs.view(), (rows, 1, d, rd), false)?;
            ops::qdq_fp8_pow2(gpu, &mut kv.view_mut(), rows * d, 32)
        })?;
        let sel = self.phase("attn: compress, index", || self.selection(a, role, x, &qr, call, lane, shared))?;
        let sel = sel.map(|k| &shared.sel[&k]);
        let owner = role.kv_owner.unwrap_or(role.layer);
        let window = call.window(lane.window_floor[role.layer]);
        let empty = gpu.pool().take(2)?;
        let latents = lane.compressed[owner].as_ref().map_or(&empty, |c| &c.latents);
        let (kc, kr, kl) = (kv.view(), lane.windows[role.layer].view(), latents.view());
        let keys = KeyRows { chunk: &kc, ring: &kr, latents: &kl };
        let s = if sel.is_some() { cfg.index_topk } else { 0 };
        let o = match &q {
            Some(q) => {
                Some(self.phase("attn: sparse_attn", || self.attend(a, q, &keys, (window, sel), cs, (rows, s)))?)
            }
            None => None,
        };
        let ring = &mut lane.windows[role.layer];
        ops::scatter_rows(gpu, &kv.view(), &mut ring.view_mut(), &call.slots.view(), (rows, d * 2, w))?;
        Ok(o)
    }

    /// `sparse_attn` of `q` over each row's key list (`window` ids, then `sel`'s `s` ids), un-RoPE'd: bf16 `[rows, heads, d]`.
    pub(crate) fn attend(
        &self,
        a: &GAttn,
        q: &Buf,
        keys: &KeyRows<'_>,
        (window, sel): (&Buf, Option<&Buf>),
        cs: &Buf,
        (rows, s): (usize, usize),
    ) -> Result<Buf, Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let (heads, d, rd, w) = (a.heads, cfg.head_dim, cfg.rope_head_dim, cfg.window_size);
        let mut o = gpu.pool().take(rows * heads * d * 2)?;
        let sel_view = sel.map(|b| b.view());
        let dims = (rows, heads, d, w, s);
        let scale = (d as f32).powf(-0.5);
        ops::sparse_attn(
            gpu,
            &q.view(),
            keys,
            &window.view(),
            sel_view.as_ref(),
            &a.sink.view(),
            &mut o.view_mut(),
            dims,
            scale,
        )?;
        ops::rope(gpu, &mut o.view_mut(), &cs.view(), (rows, heads, d, rd), true)?;
        Ok(o)
    }

    /// The layer whose selection (`[rows, index_topk]` key ids in `shared.sel`) this layer uses; `None` for window-only layers.
    #[allow(clippy::too_many_arguments)]
    fn selection(
        &self,
        a: &GAttn,
        role: &LayerRole,
        x: &Buf,
        qr: &Buf,
        call: &Call,
        lane: &mut GpuLane,
        shared: &mut Shared,
    ) -> Result<Option<usize>, Error> {
        if role.mode == AttnMode::Swa {
            return Ok(None);
        }
        let mut emitted = 0;
        if role.is_kv_source && call.run_compressor {
            emitted = self.compress_rows(a, role, x, call.pos0, call.rows, lane)?;
        }
        if !role.is_index_source {
            let owner = role.sel_owner.expect("compressed layers have a selection owner");
            assert!(shared.sel.contains_key(&owner), "the selection owner runs earlier in the same forward");
            return Ok(Some(owner));
        }
        let mut key_owner = role.kv_owner.expect("compressed layers have a KV owner");
        if role.is_kv_source && (emitted > 0 || !call.run_compressor) {
            lane.last_key_publisher = Some(role.layer);
        } else if self.opts.quirks.stale_index_keys && role.is_kv_source {
            key_owner = lane.last_key_publisher.unwrap_or(key_owner);
        }
        let sel = self.select(a, role, x, qr, call, lane, key_owner, shared)?;
        shared.sel.insert(role.layer, sel);
        Ok(Some(role.layer))
    }

    /// The lightning indexer: scores against the key owner's index keys, candidates, top-k as latent key ids.
    #[allow(clippy::too_many_arguments)]
    fn select(
        &self,
        a: &GAttn,
        role: &LayerRole,
        x: &Buf,
        qr: &Buf,
        call: &Call,
        lane: &GpuLane,
        key_owner: usize,
        shared: &mut Shared,
    ) -> Result<Buf, Error> {
        let (gpu, cfg, rows) = (self.gpu, self.cfg(), call.rows);
        let ix = a.indexer.as_ref().expect("index sources have an indexer");
        let (heads, hd, rd, topk) = (cfg.index_n_heads, cfg.index_head_dim, cfg.rope_head_dim, cfg.index_topk);
        let ratio = role.ratio;
        let cap = (call.pos0 + rows) / ratio;
        if cap == 0 {
            if role.is_candidate_source {
                shared.candidates = Some((gpu.pool().take(1)?, ratio));
            }
            return gpu.upload(&vec![ops::KEY_NONE; rows * topk]);
        }
        let mut sel = gpu.pool().take(rows * topk * 4)?;
        let mut q = ix.wq_b.forward(gpu, &Acts::new(qr, rows, cfg.q_lora_rank))?;
        ops::rope(gpu, &mut q.view_mut(), &call.cs(role.rope).view(), (rows, heads, hd, rd), false)?;
        ops::qdq_fp4(gpu, &mut q.view_mut(), rows * heads * hd, 32, Fp4Scale::E8m0)?;
        let wts = ix.weights_proj.forward(gpu, x, Io::Bf16, Io::Bf16, rows, 1)?;
        let c = ((hd as f64).powf(-0.5) * (heads as f64).powf(-0.5)) as f32;
        let cache = lane.compressed[key_owner].as_ref().expect("key owner has a cache");
        let keys = cache.index_k.as_ref().expect("key owners keep index keys");
        let mut scores = gpu.pool().take(rows * cap * 4)?;
        ops::index_scores(
            gpu,
            &q.view(),
            &wts.view(),
            &keys.view(),
            &mut scores.view_mut(),
            (rows, heads, hd, cache.groups, cap),
            (call.pos0, ratio),
            c,
        )?;
        if role.is_candidate_source {
            let mut mask = gpu.pool().take(rows * cap)?;
            let cands = ops::Candidates::Make {
                mask: &mut mask.view_mut(),
                blocks: cfg.candidate_topk_blocks,
                block: cfg.candidate_block_size,
            };
            ops::index_select(gpu, &scores.view(), cands, &mut sel.view_mut(), (rows, cap, topk), (call.pos0, ratio))?;
            shared.candidates = Some((mask, ratio));
        } else if role.uses_candidates {
            let (mask, src_ratio) =
                shared.candidates.as_ref().expect("the candidate source runs earlier in the same forward");
            let cands = ops::Candidates::Use { mask: &mask.view(), ratio: *src_ratio };
            ops::index_select(gpu, &scores.view(), cands, &mut sel.view_mut(), (rows, cap, topk), (call.pos0, ratio))?;
        } else {
            ops::index_select(
                gpu,
                &scores.view(),
                ops::Candidates::None,
                &mut sel.view_mut(),
                (rows, cap, topk),
                (call.pos0, ratio),
            )?;
        }
        Ok(sel)
    }

    /// Feeds normed rows at `pos0..` to a KV source's compressor; returns how many groups completed.
    pub(crate) fn compress_rows(
        &self,
        a: &GAttn,
        role: &LayerRole,
        x: &Buf,
        pos0: usize,
        rows: usize,
        lane: &mut GpuLane,
    ) -> Result<usize, Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let c = a.compressor.as_ref().expect("KV sources have a compressor");
        let (ratio, d) = (role.ratio, cfg.head_dim);
        let cache = lane.compressed[role.layer].as_mut().expect("KV sources have a cache");
        let (pooled, groups) = if ratio == 1 {
            (c.wkv.forward(gpu, x, Io::Bf16, Io::Bf16, rows, 1)?, rows)
        } else {
            let kv = c.wkv.forward(gpu, x, Io::Bf16, Io::F32, rows, 1)?;
            let gate = c.wgate.as_ref().expect("ratio-2 compressors have a gate").forward(
                gpu,
                x,
                Io::Bf16,
                Io::F32,
                rows,
                1,
            )?;
            if cache.open_n != pos0 % ratio {
                let what =
                    format!("layer {}: {} open rows at position {pos0}, ratio {ratio}", role.layer, cache.open_n);
                return Err(Error::Launch { op: "compressor", what });
            }
            let total = cache.open_n + rows;
            let (groups, left) = (total / ratio, total % ratio);
            let row = d * 4;
            let (mut skv, mut sgate) = (gpu.pool().take(total * row)?, gpu.pool().take(total * row)?);
            super::lane::copy(gpu, &cache.open_kv, 0, &mut skv, 0, cache.open_n * row)?;
            super::lane::copy(gpu, &cache.open_gate, 0, &mut sgate, 0, cache.open_n * row)?;
            super::lane::copy(gpu, &kv, 0, &mut skv, cache.open_n * row, rows * row)?;
            super::lane::copy(gpu, &gate, 0, &mut sgate, cache.open_n * row, rows * row)?;
            let mut pooled = gpu.pool().take(groups.max(1) * d * 2)?;
            ops::compress_pool(gpu, &skv.view(), &sgate.view(), &mut pooled.view_mut(), (groups, ratio, d))?;
            super::lane::copy(gpu, &skv, groups * ratio * row, &mut cache.open_kv, 0, left * row)?;
            super::lane::copy(gpu, &sgate, groups * ratio * row, &mut cache.open_gate, 0, left * row)?;
            cache.open_n = left;
            if let Some(recent) = cache.recent.as_mut() {
                *recent = Some((skv, sgate));
            }
            (pooled, groups)
        };
        if groups == 0 {
            return Ok(0);
        }
        let latents = self.norm(&pooled, &c.norm, groups, d)?;
        let first = cache.groups;
        let positions: Vec<usize> = (first..first + groups).map(|g| g * ratio).collect();
        let cs = gpu.upload(&ops::rope_table(self.rope(role.rope), &positions))?;
        let rd = cfg.rope_head_dim;
        let need = first + groups;
        let old_cap = cache.cap;
        if let (Some((wk, knorm)), Some(index_k)) = (&c.index_wk, cache.index_k.as_mut()) {
            let id = cfg.index_head_dim;
            let k = wk.forward(gpu, &latents, Io::Bf16, Io::Bf16, groups, 1)?;
            let mut k = self.norm(&k, knorm, groups, id)?;
            ops::rope(gpu, &mut k.view_mut(), &cs.view(), (groups, 1, id, rd), false)?;
            ops::qdq_fp4(gpu, &mut k.view_mut(), groups * id, 32, Fp4Scale::E8m0)?;
            super::lane::reserve(gpu, index_k, old_cap, first, need, id * 2)?;
            super::lane::copy(gpu, &k, 0, index_k, first * id * 2, groups * id * 2)?;
        }
        let mut lat = latents;
        ops::rope(gpu, &mut lat.view_mut(), &cs.view(), (groups, 1, d, rd), false)?;
        ops::qdq_fp4(gpu, &mut lat.view_mut(), groups * d, 16, Fp4Scale::E4m3)?;
        cache.cap = super::lane::reserve(gpu, &mut cache.latents, old_cap, first, need, d * 2)?;
        super::lane::copy(gpu, &lat, 0, &mut cache.latents, first * d * 2, groups * d * 2)?;
        cache.groups = need;
        Ok(groups)
    }
}

/// Each row's window key ids: positions `max(floor, p+1-w)..=p`, from this chunk or the ring, padded to `w`.
pub fn window_ids(pos0: usize, rows: usize, w: usize, floor: usize) -> Vec<i32> {
    let mut ids = Vec::with_capacity(rows * w);
    for r in 0..rows {
        let p = pos0 + r;
        let lo = floor.max((p + 1).saturating_sub(w));
        let start = ids.len();
        for kp in lo..=p {
            ids.push(if kp >= pos0 { key_id(KeySource::Chunk, kp - pos0) } else { key_id(KeySource::Ring, kp % w) });
        }
        ids.resize(start + w, ops::KEY_NONE);
    }
    ids
}
