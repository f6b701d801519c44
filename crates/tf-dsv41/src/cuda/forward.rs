//! Prefill in chunks (with CED bounded replay) and decode rows on the GPU, as the CPU's `Model::prefill`/`decode`.

use super::lane::{GReplay, GpuLane, copy};
use super::model::{GStreams, GpuModel, Shared, unlocked};
use crate::model::Prefetch;
use tf_core::{Error, Result};
use tf_engram::ChunkRows;

fn cuda(e: tf_cuda::Error) -> Error {
    Error::Invalid(format!("cuda: {e}"))
}

impl GpuModel {
    /// Engram ids of `tokens` per engram layer and row, advancing the lane's n-gram history.
    fn engram_ids(&self, lane: &mut GpuLane, tokens: &[u32]) -> Result<Vec<Vec<Vec<u64>>>> {
        let (Some(h), Some(hist)) = (self.hasher(), lane.engram.as_mut()) else { return Ok(Vec::new()) };
        let ids = h.hash_tokens(hist, tokens, None).map_err(|e| Error::Invalid(format!("engram: {e}")))?;
        let n = h.layout().n_layers();
        Ok((0..n).map(|l| (0..tokens.len()).map(|t| ids.at(l, t).to_vec()).collect()).collect())
    }

    /// Runs `range` of the blocks in order over `s` at positions `pos0..`.
    fn run_blocks(
        &self,
        range: std::ops::Range<usize>,
        s: &mut GStreams,
        lane: &mut GpuLane,
        pos0: usize,
        (ids, ahead): (&[Vec<Vec<u64>>], &[ChunkRows]),
        replay_pass: bool,
    ) -> Result<()> {
        let mut shared = Shared::default();
        let first = range.start;
        // The RoPE tables depend only on the rows' positions: built and uploaded once per call, not per layer.
        let mut call = self.call(pos0, s.rows, &lane.window_floor[range.clone()]).map_err(cuda)?;
        for b in &self.blocks[range] {
            let k = self.hasher().and_then(|h| h.layout().layer_index(b.role.layer));
            let engram_ids = k.and_then(|k| ids.get(k)).map(Vec::as_slice);
            self.apply_engram(b, s, engram_ids, k.and_then(|k| ahead.get(k)))?;
            call.run_compressor = !(replay_pass && b.role.layer == first);
            self.block(b, s, &call, lane, &mut shared).map_err(cuda)?;
        }
        Ok(())
    }

    /// Feeds one prompt chunk; on the `last` chunk returns the logits of the prompt's final row.
    pub fn prefill(&self, lane: &mut GpuLane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>> {
        self.prefill_with(lane, tokens, last, &[])
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
        self.prefill_with(lane, tokens, last, &ahead)
    }

    fn prefill_with(
        &self,
        lane: &mut GpuLane,
        tokens: &[u32],
        last: bool,
        ahead: &[ChunkRows],
    ) -> Result<Option<Vec<f32>>> {
        if tokens.is_empty() {
            return Err(Error::Invalid("prefill of an empty chunk".into()));
        }
        let pos0 = lane.pos;
        let mut s = self.embed_rows(tokens)?;
        let ids = self.engram_ids(lane, tokens)?;
        let n = self.cfg().n_layers;
        let rows = tokens.len();
        if !self.opts.replay {
            self.run_blocks(0..n, &mut s, lane, pos0, (&ids, ahead), false)?;
            lane.pos += rows;
            return if last { Ok(Some(self.last_logits(&s).map_err(cuda)?)) } else { Ok(None) };
        }
        let split = n / 2;
        self.run_blocks(0..split, &mut s, lane, pos0, (&ids, ahead), false)?;
        let b = &self.blocks[split];
        if b.role.is_kv_source {
            let a_in = self.attn_input(b, &s).map_err(cuda)?;
            self.compress_rows(&b.attn, &b.role, &a_in, pos0, rows, lane).map_err(cuda)?;
        }
        lane.pos += rows;
        self.buffer_replay(lane, pos0, s, ids).map_err(cuda)?;
        if !last {
            return Ok(None);
        }
        let buf = lane.replay.take().expect("just buffered");
        for floor in &mut lane.window_floor[split..n] {
            *floor = buf.pos0;
        }
        let mut s = GStreams { x: buf.x, mix: buf.mix, rows: buf.rows };
        self.run_blocks(split..n, &mut s, lane, buf.pos0, (&buf.engram_ids, ahead), true)?;
        Ok(Some(self.last_logits(&s).map_err(cuda)?))
    }

    /// Appends rows to the lane's replay buffer, keeping its newest `window_size`.
    fn buffer_replay(
        &self,
        lane: &mut GpuLane,
        pos0: usize,
        s: GStreams,
        ids: Vec<Vec<Vec<u64>>>,
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

    /// Runs rows after the prompt (a decode token or a few verify rows) through every layer; logits per row.
    pub fn decode(&self, lane: &mut GpuLane, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        self.decode_with(lane, tokens, &[])
    }

    /// [`GpuModel::decode`] of rows whose Engram rows were fetched ahead as one chunk.
    pub fn decode_prefetched(&self, lane: &mut GpuLane, tokens: &[u32], pf: &mut Prefetch) -> Result<Vec<Vec<f32>>> {
        let ahead = pf.next_chunk(tokens.len())?;
        self.decode_with(lane, tokens, &ahead)
    }

    fn decode_with(&self, lane: &mut GpuLane, tokens: &[u32], ahead: &[ChunkRows]) -> Result<Vec<Vec<f32>>> {
        if lane.replay.is_some() {
            return Err(Error::Invalid("decode before the prompt's last chunk was prefilled".into()));
        }
        if tokens.is_empty() {
            return Err(Error::Invalid("decode of no tokens".into()));
        }
        let pos0 = lane.pos;
        let ids = self.engram_ids(lane, tokens)?;
        let n = self.cfg().n_layers;
        let mut step = || -> Result<super::weights::Buf> {
            let mut s = self.embed_rows(tokens)?;
            self.run_blocks(0..n, &mut s, lane, pos0, (&ids, ahead), false)?;
            self.head_rows(&s).map_err(cuda)
        };
        let logits = if self.graph_step(tokens.len()) {
            self.gpu.replay(tokens.len() as u64, step).map_err(cuda)??
        } else {
            step()?
        };
        lane.pos += tokens.len();
        self.split_logits(&logits).map_err(cuda)
    }

    /// Whether this decode runs as a graph: switched on, nothing reading results mid-step, and a direct step of this size ran.
    fn graph_step(&self, rows: usize) -> bool {
        if !self.graphs || unlocked(&self.profile).is_some() || unlocked(&self.route_log).is_some() {
            return false;
        }
        !unlocked(&self.graph_warm).insert(rows)
    }
}
