//! The CUDA backend of the forward plan (`crate::plan`): the same order as the CPU's, each op on the GPU.

use super::lane::{GReplay, GpuLane, copy};
use super::model::{Call, GStreams, GpuModel, Shared, unlocked};
use super::weights::Buf;
use crate::model::Prefetch;
use crate::plan::Result;
use crate::plan::{self, Backend, EngramIds};
use tf_engram::{ChunkRows, NgramHasher};

plan::impl_lane!(GpuLane);

impl Backend for GpuModel {
    type Lane = GpuLane;
    type Streams = GStreams;
    type Ctx = Call;
    type Shared = Shared;
    type Tap = super::dspark::GTap;
    type Logits = Buf;

    fn cfg(&self) -> &crate::Config {
        &self.cfg
    }

    fn opts(&self) -> &crate::Options {
        &self.opts
    }

    fn hasher(&self) -> Option<&NgramHasher> {
        GpuModel::hasher(self)
    }

    fn engram_gates(&self) -> Vec<(usize, &crate::engram::EngramGate)> {
        self.engram_tables.iter().enumerate().filter_map(|(l, g)| g.as_ref().map(|g| (l, g))).collect()
    }

    fn embed(&self, tokens: &[u32]) -> Result<GStreams> {
        self.embed_rows(tokens)
    }

    fn rows(&self, s: &GStreams) -> usize {
        s.rows
    }

    // The RoPE tables depend only on the rows' positions: built and uploaded once per run, not per layer.
    fn begin(&self, lane: &GpuLane, range: std::ops::Range<usize>, pos0: usize, rows: usize) -> Result<Call> {
        Ok(self.call(pos0, rows, &lane.window_floor[range])?)
    }

    fn engram(
        &self,
        layer: usize,
        s: &mut GStreams,
        ids: Option<&[Vec<u64>]>,
        ahead: Option<&ChunkRows>,
    ) -> Result<()> {
        self.apply_engram(&self.blocks[layer], s, ids, ahead)
    }

    fn tap(&self, s: &GStreams, rows: &[usize]) -> Result<Option<Vec<Self::Tap>>> {
        Ok(self.tap_rows(s, rows)?)
    }

    fn block(
        &self,
        layer: usize,
        s: &mut GStreams,
        parts: &mut [plan::Part<'_, Self>],
        run_compressor: bool,
    ) -> Result<()> {
        for p in parts.iter_mut() {
            p.ctx.run_compressor = run_compressor;
        }
        Ok(GpuModel::block(self, &self.blocks[layer], s, parts)?)
    }

    fn compress_source(&self, layer: usize, s: &GStreams, pos0: usize, lane: &mut GpuLane) -> Result<()> {
        let b = &self.blocks[layer];
        if b.role.is_kv_source {
            let a_in = self.attn_input(b, s, false)?;
            let (kv, gate) = self.compress_inputs(&b.attn, &b.role, &a_in.x, s.rows)?;
            self.compress_rows(&b.attn, &b.role, (&kv, gate.as_ref(), 0), pos0, s.rows, lane)?;
        }
        Ok(())
    }

    fn buffer_replay(&self, lane: &mut GpuLane, pos0: usize, s: GStreams, ids: EngramIds) -> Result<()> {
        Ok(self.buffer_rows(lane, pos0, s, ids)?)
    }

    fn take_replay(&self, lane: &mut GpuLane) -> Option<(usize, GStreams, EngramIds)> {
        lane.replay.take().map(|r| (r.pos0, GStreams { x: r.x, mix: r.mix, rows: r.rows }, r.engram_ids))
    }

    fn arm(&self, lane: &mut GpuLane, armed: Option<plan::Armed>) -> Result<()> {
        Ok(self.arm_undo(lane, armed)?)
    }

    fn disarm(&self, lane: &mut GpuLane, keep: usize) -> Result<plan::Armed> {
        Ok(self.rewind_undo(lane, keep)?)
    }

    fn seed_drafts(&self, lane: &mut GpuLane, pos0: usize, taps: &[Self::Tap], rows: usize) -> Result<()> {
        Ok(self.seed_rings(lane, pos0, taps, rows)?)
    }

    fn head(&self, s: &GStreams, last_only: bool) -> Result<Buf> {
        if !last_only {
            return Ok(self.head_rows(s)?);
        }
        let cfg = self.cfg();
        let (xw, mw) = (cfg.hc_mult * cfg.dim * 2, (2 + cfg.hc_mult) * cfg.hc_mult * 4);
        let last = || -> std::result::Result<Buf, tf_cuda::Error> {
            let (mut x, mut mix) = (self.gpu.pool().take(xw)?, self.gpu.pool().take(mw)?);
            copy(self.gpu, &s.x, (s.rows - 1) * xw, &mut x, 0, xw)?;
            copy(self.gpu, &s.mix, (s.rows - 1) * mw, &mut mix, 0, mw)?;
            self.head_rows(&GStreams { x, mix, rows: 1 })
        };
        Ok(last()?)
    }

    fn host_logits(&self, l: Buf) -> Result<Vec<Vec<f32>>> {
        Ok(self.split_logits(&l)?)
    }

    fn decode_step<R>(&self, rows: usize, step: impl FnOnce() -> Result<R>) -> Result<R> {
        if self.graph_step(rows) { self.gpu.replay(rows as u64, step)? } else { step() }
    }
}

impl GpuModel {
    /// Feeds one prompt chunk; on the `last` chunk returns the logits of the prompt's final row.
    pub fn prefill(&self, lane: &mut GpuLane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>> {
        plan::prefill(self, lane, tokens, last, &[])
    }

    /// [`GpuModel::prefill`] of the next chunk of a prefetched prompt (started by the CPU model's `prefetch_after` on the lane's history): its Engram rows come from the read-ahead.
    pub fn prefill_prefetched(
        &self,
        lane: &mut GpuLane,
        tokens: &[u32],
        last: bool,
        pf: &mut Prefetch,
    ) -> Result<Option<Vec<f32>>> {
        let ahead = pf.next_chunk(tokens.len())?;
        plan::prefill(self, lane, tokens, last, &ahead)
    }

    /// Runs rows after the prompt (a decode token or a few verify rows) through every layer; logits per row.
    pub fn decode(&self, lane: &mut GpuLane, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        plan::decode(self, lane, tokens, &[])
    }

    /// A verify window `[t, d1 .. dk]`: [`GpuModel::decode`] that [`GpuModel::rewind`] can cut back to the rows it accepts.
    pub fn verify(&self, lane: &mut GpuLane, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        plan::verify(self, lane, tokens, &[])
    }

    /// [`GpuModel::decode`] of several lanes in one step: row-wise ops once over every lane's rows, attention per lane.
    pub fn decode_lanes(&self, lanes: &mut [&mut GpuLane], tokens: &[&[u32]]) -> Result<Vec<Vec<Vec<f32>>>> {
        plan::decode_lanes(self, lanes, tokens, &[])
    }

    /// [`GpuModel::verify`] of several lanes' windows in one step.
    pub fn verify_lanes(&self, lanes: &mut [&mut GpuLane], windows: &[&[u32]]) -> Result<Vec<Vec<Vec<f32>>>> {
        plan::verify_lanes(self, lanes, windows, &[])
    }

    /// Keeps the first `keep` rows of the last verify window, as if only they had been decoded.
    pub fn rewind(&self, lane: &mut GpuLane, keep: usize) -> Result<()> {
        plan::rewind(self, lane, keep)
    }

    /// [`GpuModel::decode`] of rows whose Engram rows were fetched ahead as one chunk.
    pub fn decode_prefetched(&self, lane: &mut GpuLane, tokens: &[u32], pf: &mut Prefetch) -> Result<Vec<Vec<f32>>> {
        let ahead = pf.next_chunk(tokens.len())?;
        plan::decode(self, lane, tokens, &ahead)
    }

    /// Appends rows to the lane's replay buffer, keeping its newest `window_size`.
    fn buffer_rows(
        &self,
        lane: &mut GpuLane,
        pos0: usize,
        s: GStreams,
        ids: EngramIds,
    ) -> std::result::Result<(), tf_cuda::Error> {
        let cfg = self.cfg();
        let (xw, mw) = (cfg.hc_mult * cfg.dim * 2, (2 + cfg.hc_mult) * cfg.hc_mult * 4);
        let (old_rows, old_pos0, mut old_ids) = match &lane.replay {
            Some(r) => (r.rows, r.pos0, r.engram_ids.clone()),
            None => (0, pos0, vec![Vec::new(); ids.len()]),
        };
        let total = old_rows + s.rows;
        let keep = total.min(cfg.window_size);
        let drop = total - keep;
        let gpu = self.gpu;
        let (mut x, mut mix) = (gpu.pool().take(keep * xw)?, gpu.pool().take(keep * mw)?);
        let from_old = old_rows.saturating_sub(drop);
        if let Some(r) = &lane.replay {
            copy(gpu, &r.x, (old_rows - from_old) * xw, &mut x, 0, from_old * xw)?;
            copy(gpu, &r.mix, (old_rows - from_old) * mw, &mut mix, 0, from_old * mw)?;
        }
        let skip_new = s.rows - (keep - from_old);
        copy(gpu, &s.x, skip_new * xw, &mut x, from_old * xw, (keep - from_old) * xw)?;
        copy(gpu, &s.mix, skip_new * mw, &mut mix, from_old * mw, (keep - from_old) * mw)?;
        for (b, new) in old_ids.iter_mut().zip(ids) {
            b.extend(new);
            b.drain(..drop.min(b.len()));
        }
        lane.replay = Some(GReplay { pos0: old_pos0 + drop, rows: keep, x, mix, engram_ids: old_ids });
        Ok(())
    }

    /// Whether this decode runs as a graph: switched on, nothing reading results mid-step, and a direct step of this size ran.
    fn graph_step(&self, rows: usize) -> bool {
        if !self.graphs || unlocked(&self.profile).is_some() || unlocked(&self.route_log).is_some() {
            return false;
        }
        !unlocked(&self.graph_warm).insert(rows)
    }
}
