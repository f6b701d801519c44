//! The CPU backend of the forward plan (`crate::plan`): embedding, blocks, replay buffer and head on host rows.

use super::{Block, BlockCall, LaneRows, Model, Streams};
use crate::attn::Shared;
use crate::linear::rms_norm_rows;
use crate::plan::Result;
use crate::plan::{self, Backend, EngramIds};
use crate::state::{ReplayRows, SeqState};
use tf_core::{Error, bf16};
use tf_engram::{ChunkRows, NgramHasher};

plan::impl_lane!(SeqState);

impl Backend for Model {
    type Lane = SeqState;
    type Streams = Streams;
    /// Nothing: a part's position is all a CPU block needs (each block picks its own RoPE table).
    type Ctx = ();
    type Shared = Shared;
    type Tap = Vec<bf16>;
    type Logits = Vec<Vec<f32>>;

    fn cfg(&self) -> &crate::Config {
        &self.cfg
    }

    fn opts(&self) -> &crate::Options {
        &self.opts
    }

    fn hasher(&self) -> Option<&NgramHasher> {
        self.hasher.as_ref()
    }

    fn engram_gates(&self) -> Vec<(usize, &crate::engram::EngramGate)> {
        self.blocks.iter().filter_map(|b| b.engram.as_ref().map(|g| (b.role.layer, g))).collect()
    }

    fn embed(&self, tokens: &[u32]) -> Result<Streams> {
        Ok(self.embed_rows(tokens)?)
    }

    fn rows(&self, s: &Streams) -> usize {
        s.pre.len()
    }

    fn begin(&self, _lane: &SeqState, _range: std::ops::Range<usize>, _pos0: usize, _rows: usize) -> Result<()> {
        Ok(())
    }

    fn engram(&self, layer: usize, s: &mut Streams, ids: Option<&[Vec<u64>]>, ahead: Option<&ChunkRows>) -> Result<()> {
        let b = &self.blocks[layer];
        Ok(b.apply_engram(s, &self.block_call(b, true, ids, ahead))?)
    }

    fn tap(&self, s: &Streams, rows: &[usize]) -> Result<Option<Vec<Vec<bf16>>>> {
        let Some(_) = &self.dspark else { return Ok(None) };
        let mean = Block::stream_mean(s, self.cfg.hc_mult, self.cfg.dim);
        let mut at = 0;
        let dim = self.cfg.dim;
        Ok(Some(
            rows.iter()
                .map(|&n| {
                    at += n;
                    mean[(at - n) * dim..at * dim].to_vec()
                })
                .collect(),
        ))
    }

    fn block(
        &self,
        layer: usize,
        s: &mut Streams,
        parts: &mut [plan::Part<'_, Self>],
        run_compressor: bool,
    ) -> Result<()> {
        let b = &self.blocks[layer];
        let mut lanes: Vec<LaneRows<'_>> = parts
            .iter_mut()
            .map(|p| LaneRows { pos0: p.pos0, rows: p.rows, st: &mut *p.lane, shared: &mut p.shared })
            .collect();
        b.forward(s, &self.block_call(b, run_compressor, None, None), &mut lanes);
        Ok(())
    }

    fn compress_source(&self, layer: usize, s: &Streams, pos0: usize, st: &mut SeqState) -> Result<()> {
        let b = &self.blocks[layer];
        if b.role.is_kv_source {
            let a_in = b.attn_input(s, &self.cfg);
            let cache = st.compressed[layer].as_mut().expect("KV sources have a cache");
            b.attn.compress_rows(&a_in, pos0, cache, self.rope(b.role.rope), self.cfg.norm());
        }
        Ok(())
    }

    fn buffer_replay(&self, st: &mut SeqState, pos0: usize, s: Streams, ids: EngramIds) -> Result<()> {
        let width = self.cfg.hc_mult * self.cfg.dim;
        let buf = st.replay.get_or_insert_with(|| ReplayRows {
            pos0,
            engram_ids: vec![Vec::new(); ids.len()],
            ..ReplayRows::default()
        });
        buf.x.extend(s.x);
        buf.pre.extend(s.pre);
        for (b, new) in buf.engram_ids.iter_mut().zip(ids) {
            b.extend(new);
        }
        let drop = buf.pre.len().saturating_sub(self.cfg.window_size);
        buf.x.drain(..drop * width);
        buf.pre.drain(..drop);
        buf.engram_ids.iter_mut().for_each(|b| drop_front(b, drop));
        buf.pos0 += drop;
        Ok(())
    }

    fn take_replay(&self, st: &mut SeqState) -> Option<(usize, Streams, EngramIds)> {
        st.replay.take().map(|r| (r.pos0, Streams { x: r.x, pre: r.pre }, r.engram_ids))
    }

    fn arm(&self, st: &mut SeqState, armed: Option<plan::Armed>) -> Result<()> {
        self.arm_undo(st, armed);
        Ok(())
    }

    fn disarm(&self, st: &mut SeqState, keep: usize) -> Result<plan::Armed> {
        Ok(self.rewind_undo(st, keep)?)
    }

    fn seed_drafts(&self, st: &mut SeqState, pos0: usize, taps: &[Vec<bf16>], rows: usize) -> Result<()> {
        self.seed_draft_rings(st, pos0, taps, rows);
        Ok(())
    }

    fn head(&self, s: &Streams, last_only: bool) -> Result<Vec<Vec<f32>>> {
        Ok(if last_only { self.logits(&last_row(s)) } else { self.logits(s) })
    }

    fn host_logits(&self, l: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        Ok(l)
    }
}

impl Model {
    /// Embeds tokens into `hc` equal streams with the one-hot pre-mix of layer 0.
    pub(crate) fn embed_rows(&self, tokens: &[u32]) -> tf_core::Result<Streams> {
        let (hc, dim) = (self.cfg.hc_mult, self.cfg.dim);
        let bytes = self.embed.bytes();
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(Error::Invalid(format!("token id {t} is outside the vocabulary of {}", self.cfg.vocab_size)));
        }
        let row = |t: u32| -> Vec<bf16> {
            let row = &bytes[t as usize * dim * 2..(t as usize + 1) * dim * 2];
            row.chunks_exact(2).map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]]))).collect()
        };
        // Under a vocabulary split each rank reads only its own ids' rows of the mapped table.
        let rows = match &self.vocab {
            Some(v) => v.embed(tokens, dim, row),
            None => tokens.iter().flat_map(|&t| row(t)).collect(),
        };
        let mut x = Vec::with_capacity(tokens.len() * hc * dim);
        for h in rows.chunks_exact(dim) {
            (0..hc).for_each(|_| x.extend_from_slice(h));
        }
        let mut onehot = vec![0.0f32; hc];
        onehot[0] = 1.0;
        Ok(Streams { x, pre: vec![onehot; tokens.len()] })
    }

    /// The settings of one block's call.
    fn block_call<'a>(
        &'a self,
        b: &Block,
        run_compressor: bool,
        engram_ids: Option<&'a [Vec<u64>]>,
        engram_rows: Option<&'a ChunkRows>,
    ) -> BlockCall<'a> {
        BlockCall {
            cfg: &self.cfg,
            rope: self.rope(b.role.rope),
            run_compressor,
            quirks: self.opts.quirks,
            engram_ids,
            engram_rows,
        }
    }

    /// f32 logits of each row of the final stream state (`head(norm(hc_pre(X, pre)))`).
    pub fn logits(&self, s: &Streams) -> Vec<Vec<f32>> {
        let collapsed = s.collapse(self.cfg.hc_mult, self.cfg.dim);
        let normed: Vec<f32> =
            rms_norm_rows(&collapsed, &self.norm, self.cfg.norm()).iter().map(|v| v.to_f32()).collect();
        let rows = s.pre.len();
        self.head_rows(&normed, rows).chunks_exact(self.cfg.vocab_size).map(<[f32]>::to_vec).collect()
    }

    /// The head's f32 logits of `rows` normed rows, every rank's vocabulary share gathered under a vocabulary split.
    pub(crate) fn head_rows(&self, normed: &[f32], rows: usize) -> Vec<f32> {
        let local = self.head.forward_f32(normed, rows);
        match &self.vocab {
            Some(v) => v.logits(&local, rows),
            None => local,
        }
    }

    /// Feeds one prompt chunk; on the `last` chunk returns the logits of the prompt's final row.
    pub fn prefill(&self, st: &mut SeqState, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>> {
        plan::prefill(self, st, tokens, last, &[])
    }

    /// As [`Model::prefill`], with this chunk's Engram rows (per engram layer) already fetched.
    pub(crate) fn prefill_with(
        &self,
        st: &mut SeqState,
        tokens: &[u32],
        last: bool,
        ahead: &[ChunkRows],
    ) -> Result<Option<Vec<f32>>> {
        plan::prefill(self, st, tokens, last, ahead)
    }

    /// Runs rows after the prompt (one decode token, or a few verify rows) through every layer; logits per row.
    pub fn decode(&self, st: &mut SeqState, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        plan::decode(self, st, tokens, &[])
    }

    /// A verify window `[t, d1 .. dk]`: [`Model::decode`] that [`Model::rewind`] can cut back to the rows it accepts.
    pub fn verify(&self, st: &mut SeqState, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        plan::verify(self, st, tokens, &[])
    }

    /// [`Model::decode`] of several lanes in one step (`tokens[i]` on `lanes[i]`); each lane's rows equal its decode alone.
    pub fn decode_lanes(&self, lanes: &mut [&mut SeqState], tokens: &[&[u32]]) -> Result<Vec<Vec<Vec<f32>>>> {
        plan::decode_lanes(self, lanes, tokens, &[])
    }

    /// [`Model::verify`] of several lanes' windows in one step; [`Model::rewind`] then cuts each lane back on its own.
    pub fn verify_lanes(&self, lanes: &mut [&mut SeqState], windows: &[&[u32]]) -> Result<Vec<Vec<Vec<f32>>>> {
        plan::verify_lanes(self, lanes, windows, &[])
    }

    /// Keeps the first `keep` rows of the last verify window, as if only they had been decoded.
    pub fn rewind(&self, st: &mut SeqState, keep: usize) -> Result<()> {
        plan::rewind(self, st, keep)
    }

    /// [`Model::decode`] with these rows' Engram rows fetched ahead (one chunk per Engram layer, [`crate::model::Prefetch`]).
    pub(crate) fn decode_with(&self, st: &mut SeqState, tokens: &[u32], ahead: &[ChunkRows]) -> Result<Vec<Vec<f32>>> {
        plan::decode(self, st, tokens, ahead)
    }
}

fn last_row(s: &Streams) -> Streams {
    let rows = s.pre.len();
    let width = s.x.len() / rows;
    Streams { x: s.x[(rows - 1) * width..].to_vec(), pre: vec![s.pre[rows - 1].clone()] }
}

fn drop_front<T>(v: &mut Vec<T>, n: usize) {
    v.drain(..n.min(v.len()));
}
