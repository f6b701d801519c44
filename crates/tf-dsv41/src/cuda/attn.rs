//! CSA2 attention on the GPU (dsv41 §6), the CPU's `AttnWeights::forward` op for op.

use super::lane::GpuLane;
use super::layer::GAttn;
use super::model::{Call, GpuModel, Shared};
use super::ops::{self, AttnPath, Io, KeyRows, KeySource, key_id};
use super::weights::{Buf, Normed};
use crate::config::{AttnMode, LayerRole, RopeKind};
use tf_core::formats::Fp4Scale;
use tf_cuda::Error;

/// A compressor's inputs of some rows: kv and, past ratio 1, the gate.
pub(crate) type Fed = (Buf, Option<Buf>);
/// A lane's rows of compressor inputs: kv, the gate, and the lane's first row in both.
pub(crate) type FedRows<'f> = (&'f Buf, Option<&'f Buf>, usize);

/// Which key ids a lane's rows read past the window: none, an earlier layer's selection, or this layer's indexer with these keys.
pub(crate) enum Pick {
    Window,
    Owner(usize),
    Index(usize),
}

/// [`GpuModel::attn_front`]'s rows: the normed low-rank query with its codes, the query, the normed KV.
type Front = (Normed, Option<Buf>, Buf);

/// One lane's share of an attention call: its rows' context, its caches, and the selections it hands to later layers.
pub(crate) struct LaneAttn<'a> {
    pub(super) call: &'a Call,
    pub(super) lane: &'a mut GpuLane,
    pub(super) shared: &'a mut Shared,
}

impl GpuModel {
    /// `Options::split_attn`: the split kernels where they fit, else one block per (row, head).
    pub(super) fn attn_path(&self) -> AttnPath {
        if self.opts.split_attn { AttnPath::Auto } else { AttnPath::Whole }
    }

    /// RMSNorm of `rows` bf16 rows of `dim` into a new buffer.
    pub(crate) fn norm(&self, x: &Buf, w: &Buf, rows: usize, dim: usize) -> Result<Buf, Error> {
        Ok(self.norm_rows(x, w, (rows, dim), false)?.x)
    }

    /// Code buffers for `rows × dim` when a norm feeding FP8 linears (`codes`) writes them (`Options::norm_codes`).
    pub(crate) fn code_bufs(&self, rows: usize, dim: usize, codes: bool) -> Result<Option<(Buf, Buf)>, Error> {
        if !(codes && self.opts.norm_codes && dim.is_multiple_of(32)) {
            return Ok(None);
        }
        Ok(Some((self.gpu.pool().take(rows * dim)?, self.gpu.pool().take(rows * dim / 32 * 4)?)))
    }

    /// [`GpuModel::norm`] as a linear's input; with `codes` (its FP8 linears read them) and `Options::norm_codes`, its codes from the same launch.
    pub(crate) fn norm_rows(
        &self,
        x: &Buf,
        w: &Buf,
        (rows, dim): (usize, usize),
        codes: bool,
    ) -> Result<Normed, Error> {
        let mut y = self.gpu.pool().take(rows * dim * 2)?;
        let mut fp8 = self.code_bufs(rows, dim, codes)?;
        let out = fp8.as_mut().map(|(c, s)| ops::Codes { codes: c.view_mut(), scales: s.view_mut() });
        ops::rms_norm(self.gpu, &x.view(), &w.view(), &mut y.view_mut(), out, rows, dim, self.cfg().norm())?;
        Ok(Normed { x: y, rows, k: dim, fp8 })
    }

    /// Attention over the call's rows (`x` normed, bf16 `[rows, dim]`); updates the lane's caches, returns bf16 `[rows, dim]`.
    pub(crate) fn attention(
        &self,
        a: &GAttn,
        role: &LayerRole,
        x: &Normed,
        call: &Call,
        lane: &mut GpuLane,
        shared: &mut Shared,
    ) -> Result<Buf, Error> {
        if role.is_dspark {
            return self.draft_attention(a, &x.x, &[(call, &lane.windows[role.layer])]);
        }
        self.attend_lanes(a, role, x, &mut [LaneAttn { call, lane, shared }])
    }

    /// [`GpuModel::attention`] of several lanes' rows (in order in `x`): every row-wise op once over all rows, the rest per lane.
    pub(crate) fn attention_lanes(
        &self,
        a: &GAttn,
        role: &LayerRole,
        x: &Normed,
        parts: &mut [crate::plan::Part<'_, GpuModel>],
    ) -> Result<Buf, Error> {
        if role.is_dspark {
            let lanes: Vec<(&Call, &Buf)> = parts.iter().map(|p| (&p.ctx, &p.lane.windows[role.layer])).collect();
            return self.draft_attention(a, &x.x, &lanes);
        }
        let mut lanes: Vec<LaneAttn<'_>> =
            parts.iter_mut().map(|p| LaneAttn { call: &p.ctx, lane: &mut *p.lane, shared: &mut p.shared }).collect();
        self.attend_lanes(a, role, x, &mut lanes)
    }

    /// Every lane's RoPE tables of `kind`, one after another: a lone lane's own, or uploaded once per step on the first lane.
    pub(super) fn lane_tables<'c>(
        &self,
        first: &'c Call,
        spans: &[(usize, usize)],
        kind: RopeKind,
    ) -> Result<&'c Buf, Error> {
        if spans.len() == 1 {
            return Ok(first.cs(kind));
        }
        if first.lanes_cs.get().is_none() {
            let positions: Vec<usize> = spans.iter().flat_map(|&(p, r)| p..p + r).collect();
            let table = |k| self.gpu.upload(&ops::rope_table(self.rope(k), &positions));
            let _ = first.lanes_cs.set((spans.to_vec(), [table(RopeKind::Plain)?, table(RopeKind::Yarn)?]));
        }
        let (kept, t) = first.lanes_cs.get().expect("set above");
        if kept != spans {
            let what = format!("the step's lanes changed between layers: {kept:?} then {spans:?}");
            return Err(Error::Launch { op: "attention of several lanes", what });
        }
        Ok(match kind {
            RopeKind::Plain => &t[0],
            RopeKind::Yarn => &t[1],
        })
    }

    /// Lanes' rows one after another in `x`: row-wise ops once over all rows, caches per lane; every lane gets its bits alone.
    fn attend_lanes(&self, a: &GAttn, role: &LayerRole, x: &Normed, lanes: &mut [LaneAttn<'_>]) -> Result<Buf, Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let (heads, d, rd, w) = (a.heads, cfg.head_dim, cfg.rope_head_dim, cfg.window_size);
        let spans: Vec<(usize, usize)> = lanes.iter().map(|l| (l.call.pos0, l.call.rows)).collect();
        let rows: usize = spans.iter().map(|s| s.1).sum();
        let (qr, mut q, mut kv) = self.phase("attn: q, kv", || self.attn_front(a, x, rows))?;
        let cs = self.lane_tables(lanes[0].call, &spans, role.rope)?;
        self.phase("attn: rope", || {
            if let Some(q) = q.as_mut() {
                ops::rope(gpu, &mut q.view_mut(), &cs.view(), (rows, heads, d, rd), false)?;
            }
            ops::rope(gpu, &mut kv.view_mut(), &cs.view(), (rows, 1, d, rd), false)?;
            ops::qdq_fp8_pow2(gpu, &mut kv.view_mut(), rows * d, 32)
        })?;
        let ix = match role.mode != AttnMode::Swa && role.is_index_source {
            true => Some(self.phase("attn: compress, index", || self.index_rows(a, &x.x, &qr, cs, rows))?),
            false => None,
        };
        let mut o = match heads {
            0 => None,
            _ => Some(gpu.pool().take(rows * heads * d * 2)?),
        };
        let fed = self.phase("attn: compress, index", || self.compress_lanes(a, role, &x.x, lanes))?;
        let (mut picks, mut at) = (Vec::with_capacity(lanes.len()), 0);
        for l in lanes.iter_mut() {
            let rows = fed.as_ref().filter(|_| role.is_kv_source && l.call.run_compressor);
            let rows = rows.map(|(kv, gate)| (kv, gate.as_ref(), at));
            picks.push(self.phase("attn: compress, index", || self.selection(a, role, rows, l))?);
            at += l.call.rows;
        }
        if picks.iter().any(|p| matches!(p, Pick::Index(_))) {
            let ix = ix.as_ref().expect("index sources get their indexer inputs");
            self.phase("attn: compress, index", || self.select_lanes(role, ix, lanes, &picks))?;
        }
        let sels: Vec<Option<usize>> = picks
            .iter()
            .map(|p| match p {
                Pick::Window => None,
                Pick::Owner(o) => Some(*o),
                Pick::Index(_) => Some(role.layer),
            })
            .collect();
        if let (Some(q), Some(o)) = (q.as_ref(), o.as_mut()) {
            self.phase("attn: sparse_attn", || self.sparse_lanes(a, role, (q, &kv), lanes, &sels, o))?;
        }
        // Each lane's new rows enter its ring after every lane's attention read the ring's older rows.
        if lanes.len() == 1 || !self.opts.joint_lanes {
            let mut at = 0;
            for l in lanes.iter_mut() {
                let (r, ring) = (l.call.rows, &mut l.lane.windows[role.layer]);
                let kc = kv.view().slice(at * d * 2..(at + r) * d * 2);
                ops::scatter_rows(gpu, &kc, &mut ring.view_mut(), &l.call.slots.view(), (r, d * 2, w))?;
                at += r;
            }
        } else {
            let mut parts: Vec<_> = lanes
                .iter_mut()
                .map(|l| (l.lane.windows[role.layer].view_mut(), l.call.slot_ids.as_slice(), w))
                .collect();
            ops::scatter_rows_into(gpu, &kv.view(), &mut parts, d * 2)?;
        }
        if let Some(o) = o.as_mut() {
            self.phase("attn: sparse_attn", || {
                ops::rope(gpu, &mut o.view_mut(), &cs.view(), (rows, heads, d, rd), true)
            })?;
        }
        self.attn_output(a, o.as_ref(), rows)
    }

    /// `sparse_attn` of every lane's rows, each over its own keys: one launch with `joint_lanes`, else a launch per lane.
    fn sparse_lanes(
        &self,
        a: &GAttn,
        role: &LayerRole,
        (q, kv): (&Buf, &Buf),
        lanes: &[LaneAttn<'_>],
        sels: &[Option<usize>],
        o: &mut Buf,
    ) -> Result<(), Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let (heads, d, w) = (a.heads, cfg.head_dim, cfg.window_size);
        let (empty, owner) = (gpu.pool().take(2)?, role.kv_owner.unwrap_or(role.layer));
        let s = if sels.iter().any(Option::is_some) { cfg.index_topk } else { 0 };
        let mut views = Vec::with_capacity(lanes.len());
        let mut at = 0;
        for (l, sel) in lanes.iter().zip(sels) {
            let r = l.call.rows;
            let kc = kv.view().slice(at * d * 2..(at + r) * d * 2);
            let window = l.call.window(l.lane.window_floor[role.layer]).view();
            let latents = l.lane.compressed[owner].as_ref().map_or(&empty, |c| &c.latents).view();
            let sel = sel.map(|k| l.shared.sel[&k].view());
            views.push((kc, l.lane.windows[role.layer].view(), latents, window, sel, r));
            at += r;
        }
        let keys: Vec<ops::LaneKeys<'_>> = views
            .iter()
            .map(|(chunk, ring, latents, window, sel, rows)| ops::LaneKeys {
                keys: KeyRows { chunk, ring, latents },
                window,
                sel: sel.as_ref(),
                rows: *rows,
            })
            .collect();
        let (sink, scale) = (a.sink.view(), (d as f32).powf(-0.5));
        if keys.len() == 1 || !self.opts.joint_lanes {
            let (ow, mut at) = (heads * d * 2, 0);
            for k in &keys {
                let (ql, mut ol) =
                    (q.view().slice(at * ow..(at + k.rows) * ow), o.dev_mut().slice_mut(at * ow..(at + k.rows) * ow));
                let dims = (k.rows, heads, d, w, s);
                ops::sparse_attn(self.attn_path(), gpu, &ql, &k.keys, k.window, k.sel, &sink, &mut ol, dims, scale)?;
                at += k.rows;
            }
            return Ok(());
        }
        ops::sparse_attn_rows(gpu, &q.view(), &keys, &sink, &mut o.view_mut(), (heads, d, w, s), scale)
    }

    /// The row-wise front of attention: normed low-rank query (with the FP8 codes its `wq_b` read), the query (none on a rank without heads), normed KV; no RoPE yet.
    fn attn_front(&self, a: &GAttn, x: &Normed, rows: usize) -> Result<Front, Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let xq = x.acts();
        let mut qr = self.norm_rows(&a.wq_a.forward(gpu, &xq)?, &a.q_norm, (rows, cfg.q_lora_rank), a.wq_b.is_fp8())?;
        let qa = qr.acts();
        // A tensor-parallel rank without heads runs no query (its share of the outputs is empty).
        let q = match a.heads {
            0 => None,
            _ => Some(a.wq_b.forward(gpu, &qa)?),
        };
        // Codes `wq_b` made itself go with the rows, for the indexer's `wq_b`: one quantization for both.
        if let Some(made) = qa.into_fp8() {
            qr.fp8 = Some(made);
        }
        let kv = self.norm(&a.wkv.forward(gpu, &xq)?, &a.kv_norm, rows, cfg.head_dim)?;
        Ok((qr, q, kv))
    }

    /// The indexer's row-wise inputs of every row: its query (RoPE'd, FP4-rounded) and its per-head weights.
    fn index_rows(&self, a: &GAttn, x: &Buf, qr: &Normed, cs: &Buf, rows: usize) -> Result<(Buf, Buf), Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let ix = a.indexer.as_ref().expect("index sources have an indexer");
        let (heads, hd, rd) = (cfg.index_n_heads, cfg.index_head_dim, cfg.rope_head_dim);
        // The low-rank query's codes from its norm or the main query's `wq_b`, when either made them: one quantization for all.
        let mut q = ix.wq_b.forward(gpu, &qr.acts())?;
        ops::rope(gpu, &mut q.view_mut(), &cs.view(), (rows, heads, hd, rd), false)?;
        ops::qdq_fp4(gpu, &mut q.view_mut(), rows * heads * hd, 32, Fp4Scale::E8m0)?;
        let wts = ix.weights_proj.forward(gpu, x, Io::Bf16, Io::Bf16, rows, 1)?;
        Ok((q, wts))
    }

    /// Feeds this lane's compressor and says which selection (key ids in `shared.sel`) its rows use.
    fn selection(
        &self,
        a: &GAttn,
        role: &LayerRole,
        fed: Option<FedRows<'_>>,
        l: &mut LaneAttn<'_>,
    ) -> Result<Pick, Error> {
        if role.mode == AttnMode::Swa {
            return Ok(Pick::Window);
        }
        let (call, rows) = (l.call, l.call.rows);
        let mut emitted = 0;
        if let Some(fed) = fed {
            emitted = self.compress_rows(a, role, fed, call.pos0, rows, l.lane)?;
        }
        if !role.is_index_source {
            let owner = role.sel_owner.expect("compressed layers have a selection owner");
            assert!(l.shared.sel.contains_key(&owner), "the selection owner runs earlier in the same forward");
            return Ok(Pick::Owner(owner));
        }
        let mut key_owner = role.kv_owner.expect("compressed layers have a KV owner");
        if role.is_kv_source && (emitted > 0 || !call.run_compressor) {
            l.lane.last_key_publisher = Some(role.layer);
        } else if self.opts.quirks.stale_index_keys && role.is_kv_source {
            key_owner = l.lane.last_key_publisher.unwrap_or(key_owner);
        }
        Ok(Pick::Index(key_owner))
    }

    /// A KV source's compressor inputs of `rows` normed rows: kv (bf16 at ratio 1, else f32) and, past ratio 1, the gate (f32).
    pub(crate) fn compress_inputs(&self, a: &GAttn, role: &LayerRole, x: &Buf, rows: usize) -> Result<Fed, Error> {
        let gpu = self.gpu;
        let c = a.compressor.as_ref().expect("KV sources have a compressor");
        if role.ratio == 1 {
            return Ok((c.wkv.forward(gpu, x, Io::Bf16, Io::Bf16, rows, 1)?, None));
        }
        let kv = c.wkv.forward(gpu, x, Io::Bf16, Io::F32, rows, 1)?;
        let gate = c.wgate.as_ref().expect("ratio-2 compressors have a gate");
        Ok((kv, Some(gate.forward(gpu, x, Io::Bf16, Io::F32, rows, 1)?)))
    }

    /// The compressor inputs of every lane's rows, when any lane runs its compressor: the dense products once over all rows.
    fn compress_lanes(
        &self,
        a: &GAttn,
        role: &LayerRole,
        x: &Buf,
        lanes: &[LaneAttn<'_>],
    ) -> Result<Option<Fed>, Error> {
        if !role.is_kv_source || !lanes.iter().any(|l| l.call.run_compressor) {
            return Ok(None);
        }
        let rows = lanes.iter().map(|l| l.call.rows).sum();
        Ok(Some(self.compress_inputs(a, role, x, rows)?))
    }

    /// Feeds a KV source's compressor inputs of `rows` rows at `pos0..` (see `compress_inputs`); returns how many groups completed.
    pub(crate) fn compress_rows(
        &self,
        a: &GAttn,
        role: &LayerRole,
        (kv, gate, at): FedRows<'_>,
        pos0: usize,
        rows: usize,
        lane: &mut GpuLane,
    ) -> Result<usize, Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let c = a.compressor.as_ref().expect("KV sources have a compressor");
        let (ratio, d) = (role.ratio, cfg.head_dim);
        let cache = lane.compressed[role.layer].as_mut().expect("KV sources have a cache");
        let own;
        let (pooled, groups) = if ratio == 1 {
            // The lane's rows of a shared product start at row `at`; `norm` below reads a buffer from its start.
            let pooled = match at {
                0 => kv,
                _ => {
                    let mut part = gpu.pool().take(rows * d * 2)?;
                    super::lane::copy(gpu, kv, at * d * 2, &mut part, 0, rows * d * 2)?;
                    own = part;
                    &own
                }
            };
            (pooled, rows)
        } else {
            let gate = gate.expect("compress_inputs gives a gate past ratio 1");
            if cache.open_n != pos0 % ratio {
                let what =
                    format!("layer {}: {} open rows at position {pos0}, ratio {ratio}", role.layer, cache.open_n);
                return Err(Error::Launch { op: "compressor", what });
            }
            let total = cache.open_n + rows;
            let (groups, left) = (total / ratio, total % ratio);
            let row = d * 4;
            // No group completes and no rewind keeps the window: the rows join the open ones in place (ratio rows fit).
            if groups == 0 && cache.recent.is_none() {
                super::lane::copy(gpu, kv, at * row, &mut cache.open_kv, cache.open_n * row, rows * row)?;
                super::lane::copy(gpu, gate, at * row, &mut cache.open_gate, cache.open_n * row, rows * row)?;
                cache.open_n = total;
                return Ok(0);
            }
            let (mut skv, mut sgate) = (gpu.pool().take(total * row)?, gpu.pool().take(total * row)?);
            super::lane::copy(gpu, &cache.open_kv, 0, &mut skv, 0, cache.open_n * row)?;
            super::lane::copy(gpu, &cache.open_gate, 0, &mut sgate, 0, cache.open_n * row)?;
            super::lane::copy(gpu, kv, at * row, &mut skv, cache.open_n * row, rows * row)?;
            super::lane::copy(gpu, gate, at * row, &mut sgate, cache.open_n * row, rows * row)?;
            let mut pooled = gpu.pool().take(groups.max(1) * d * 2)?;
            ops::compress_pool(gpu, &skv.view(), &sgate.view(), &mut pooled.view_mut(), (groups, ratio, d))?;
            super::lane::copy(gpu, &skv, groups * ratio * row, &mut cache.open_kv, 0, left * row)?;
            super::lane::copy(gpu, &sgate, groups * ratio * row, &mut cache.open_gate, 0, left * row)?;
            cache.open_n = left;
            if let Some(recent) = cache.recent.as_mut() {
                *recent = Some((skv, sgate));
            }
            own = pooled;
            (&own, groups)
        };
        if groups == 0 {
            return Ok(0);
        }
        let latents = self.norm(pooled, &c.norm, groups, d)?;
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
