//! Prefill in chunks of any size (with CED bounded replay) and decode rows, each ending in logits.

use super::{Block, BlockCall, Model, Streams};
use crate::attn::Shared;
use crate::linear::rms_norm_rows;
use crate::state::{ReplayRows, SeqState};
use tf_core::{Error, Result, bf16};
use tf_engram::ChunkRows;

impl Model {
    /// Embeds tokens into `hc` equal streams with the one-hot pre-mix of layer 0.
    pub(crate) fn embed_rows(&self, tokens: &[u32]) -> Result<Streams> {
        let (hc, dim) = (self.cfg.hc_mult, self.cfg.dim);
        let bytes = self.embed.bytes();
        let mut x = Vec::with_capacity(tokens.len() * hc * dim);
        for &t in tokens {
            if t as usize >= self.cfg.vocab_size {
                return Err(Error::Invalid(format!(
                    "token id {t} is outside the vocabulary of {}",
                    self.cfg.vocab_size
                )));
            }
            let row = &bytes[t as usize * dim * 2..(t as usize + 1) * dim * 2];
            let h: Vec<bf16> = row.chunks_exact(2).map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]]))).collect();
            (0..hc).for_each(|_| x.extend_from_slice(&h));
        }
        let mut onehot = vec![0.0f32; hc];
        onehot[0] = 1.0;
        Ok(Streams { x, pre: vec![onehot; tokens.len()] })
    }

    /// Engram ids of `tokens`, per engram layer and row, advancing the sequence's n-gram history.
    pub(crate) fn engram_ids(&self, st: &mut SeqState, tokens: &[u32]) -> Result<Vec<Vec<Vec<u64>>>> {
        let (Some(h), Some(hist)) = (&self.hasher, st.engram.as_mut()) else { return Ok(Vec::new()) };
        let ids = h.hash_tokens(hist, tokens, None).map_err(|e| Error::Invalid(format!("engram: {e}")))?;
        let n = h.layout().n_layers();
        Ok((0..n).map(|l| (0..tokens.len()).map(|t| ids.at(l, t).to_vec()).collect()).collect())
    }

    /// Runs blocks in order; returns DSpark taps (stream means entering each target layer), in target order.
    fn run_blocks(
        &self,
        blocks: &[Block],
        s: &mut Streams,
        st: &mut SeqState,
        pos0: usize,
        (ids, ahead): (&[Vec<Vec<u64>>], &[ChunkRows]),
        replay_pass: bool,
    ) -> Result<Vec<Vec<bf16>>> {
        let mut shared = Shared::default();
        let mut taps = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            let k = self.hasher.as_ref().and_then(|h| h.layout().layer_index(b.role.layer));
            let engram_ids = k.and_then(|k| ids.get(k)).map(Vec::as_slice);
            let engram_rows = k.and_then(|k| ahead.get(k));
            let call = BlockCall {
                cfg: &self.cfg,
                rope: self.rope(b.role.rope),
                pos0,
                run_compressor: !(replay_pass && i == 0),
                quirks: self.opts.quirks,
                engram_ids,
                engram_rows,
            };
            b.apply_engram(s, &call)?;
            if self.dspark.is_some() && self.cfg.dspark_target_layer_ids.contains(&b.role.layer) {
                taps.push(Block::stream_mean(s, self.cfg.hc_mult, self.cfg.dim));
            }
            b.forward(s, &call, st, &mut shared);
        }
        Ok(taps)
    }

    /// f32 logits of each row of the final stream state (`head(norm(hc_pre(X, pre)))`).
    pub fn logits(&self, s: &Streams) -> Vec<Vec<f32>> {
        let collapsed = s.collapse(self.cfg.hc_mult, self.cfg.dim);
        let normed: Vec<f32> =
            rms_norm_rows(&collapsed, &self.norm, self.cfg.norm()).iter().map(|v| v.to_f32()).collect();
        let rows = s.pre.len();
        self.head.forward_f32(&normed, rows).chunks_exact(self.cfg.vocab_size).map(<[f32]>::to_vec).collect()
    }

    /// Feeds one prompt chunk; on the `last` chunk returns the logits of the prompt's final row.
    pub fn prefill(&self, st: &mut SeqState, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>> {
        self.prefill_with(st, tokens, last, &[])
    }

    /// As [`Model::prefill`], with this chunk's Engram rows (per engram layer) already fetched.
    pub(crate) fn prefill_with(
        &self,
        st: &mut SeqState,
        tokens: &[u32],
        last: bool,
        ahead: &[ChunkRows],
    ) -> Result<Option<Vec<f32>>> {
        if tokens.is_empty() {
            return Err(Error::Invalid("prefill of an empty chunk".into()));
        }
        let pos0 = st.pos;
        let ids = self.engram_ids(st, tokens)?;
        let mut s = self.embed_rows(tokens)?;
        let split = self.cfg.n_layers / 2;
        if !self.opts.replay {
            let taps = self.run_blocks(&self.blocks, &mut s, st, pos0, (&ids, ahead), false)?;
            self.seed_draft_rings(st, pos0, &taps, tokens.len());
            st.pos += tokens.len();
            return Ok(last.then(|| self.logits(&last_row(&s))).map(|mut l| l.remove(0)));
        }
        self.run_blocks(&self.blocks[..split], &mut s, st, pos0, (&ids, ahead), false)?;
        let b = &self.blocks[split];
        if b.role.is_kv_source {
            let a_in = b.attn_input(&s, &self.cfg);
            let cache = st.compressed[split].as_mut().expect("KV sources have a cache");
            b.attn.compress_rows(&a_in, pos0, cache, self.rope(b.role.rope), self.cfg.norm());
        }
        st.pos += tokens.len();
        self.buffer_replay(st, pos0, s, ids);
        if !last {
            return Ok(None);
        }
        let buf = st.replay.take().expect("just buffered");
        for floor in &mut st.window_floor[split..self.cfg.n_layers] {
            *floor = buf.pos0;
        }
        let mut s = Streams { x: buf.x, pre: buf.pre };
        let taps = self.run_blocks(&self.blocks[split..], &mut s, st, buf.pos0, (&buf.engram_ids, ahead), true)?;
        self.seed_draft_rings(st, buf.pos0, &taps, s.pre.len());
        Ok(Some(self.logits(&last_row(&s)).remove(0)))
    }

    /// Appends rows to the replay buffer and keeps its newest `window_size`.
    fn buffer_replay(&self, st: &mut SeqState, pos0: usize, s: Streams, ids: Vec<Vec<Vec<u64>>>) {
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
    }

    /// Runs rows after the prompt (one decode token, or a few verify rows) through every layer; logits per row.
    pub fn decode(&self, st: &mut SeqState, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        self.decode_with(st, tokens, &[])
    }

    /// [`Model::decode`] with these rows' Engram rows fetched ahead (one chunk per Engram layer, [`crate::model::Prefetch`]).
    pub(crate) fn decode_with(&self, st: &mut SeqState, tokens: &[u32], ahead: &[ChunkRows]) -> Result<Vec<Vec<f32>>> {
        if st.replay.is_some() {
            return Err(Error::Invalid("decode before the prompt's last chunk was prefilled".into()));
        }
        if tokens.is_empty() {
            return Err(Error::Invalid("decode of no tokens".into()));
        }
        let pos0 = st.pos;
        let ids = self.engram_ids(st, tokens)?;
        let mut s = self.embed_rows(tokens)?;
        let taps = self.run_blocks(&self.blocks, &mut s, st, pos0, (&ids, ahead), false)?;
        self.seed_draft_rings(st, pos0, &taps, tokens.len());
        st.pos += tokens.len();
        Ok(self.logits(&s))
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
