//! The dsv41 forward plan written once (issue 22): Engram ids, embedding, blocks with DSpark taps, bounded replay (§7), head; `model/` and `cuda/` implement [`Backend`].

use crate::Config;
use crate::Error;
use std::ops::Range;
use tf_core::Error as CoreError;

/// The plan's result: tf-dsv41's error, each backend's cause kept whole.
pub type Result<T> = std::result::Result<T, Error>;
use tf_engram::{ChunkRows, NgramHasher, NgramHistory};

/// Engram ids per Engram layer, per row: `ids[k][row]`.
pub type EngramIds = Vec<Vec<Vec<u64>>>;

/// One sequence's state on a backend: what the plan reads and moves between calls.
pub trait Lane {
    /// Tokens already processed (the next row's position).
    fn pos_mut(&mut self) -> &mut usize;
    /// The n-gram history of the Engram hasher, when the model has Engram.
    fn engram_history(&mut self) -> Option<&mut NgramHistory>;
    /// First position each layer's window may see (the replay start for decoder layers).
    fn window_floor_mut(&mut self) -> &mut [usize];
    /// Prompt rows wait for the decoder (bounded replay, before the prompt's last chunk).
    fn replay_pending(&self) -> bool;
}

/// [`Lane`] for a lane type whose fields are `pos`, `engram`, `window_floor` and `replay` (both backends' lanes).
macro_rules! impl_lane {
    ($t:ty) => {
        impl $crate::plan::Lane for $t {
            fn pos_mut(&mut self) -> &mut usize {
                &mut self.pos
            }

            fn engram_history(&mut self) -> Option<&mut tf_engram::NgramHistory> {
                self.engram.as_mut()
            }

            fn window_floor_mut(&mut self) -> &mut [usize] {
                &mut self.window_floor
            }

            fn replay_pending(&self) -> bool {
                self.replay.is_some()
            }
        }
    };
}
pub(crate) use impl_lane;

/// Where a verify window started: its position, its rows' tokens and the n-gram history before them.
#[derive(Clone, Debug)]
pub struct Armed {
    pub pos0: usize,
    pub tokens: Vec<u32>,
    pub history: Option<NgramHistory>,
}

/// The ops of the dsv41 forward on one backend; [`prefill`] and [`decode`] call them in the plan's order.
pub trait Backend {
    type Lane: Lane;
    /// Rows moving through the stack: the `hc` streams and each row's pre-mix.
    type Streams;
    /// What one run over a range of blocks shares (RoPE tables, window ids), built once per run.
    type Ctx;
    /// Selections and candidates that index sources hand to later layers of the same run.
    type Shared: Default;
    /// A DSpark tap (the stream mean entering a target layer).
    type Tap;
    /// Logits as the backend holds them until the plan asks for them on the host.
    type Logits;

    fn cfg(&self) -> &Config;
    fn opts(&self) -> &crate::Options;
    /// Whether the model was loaded with bounded replay.
    fn replay(&self) -> bool {
        self.opts().replay
    }
    fn hasher(&self) -> Option<&NgramHasher>;
    /// Each Engram layer's host gate (its table), as `(layer, gate)`.
    fn engram_gates(&self) -> Vec<(usize, &crate::engram::EngramGate)>;
    /// Starts the Engram read-ahead of `prompt`'s chunks (lengths `lens`) after `hist`; `None` without Engram.
    fn prefetch_after(
        &self,
        hist: Option<&NgramHistory>,
        prompt: &[u32],
        lens: &[usize],
        ahead: (usize, usize),
    ) -> Result<Option<crate::model::Prefetch>> {
        Ok(crate::model::prefetch::start(self.hasher(), self.engram_gates().into_iter(), hist, prompt, lens, ahead)?)
    }
    /// `hc` equal streams of each token's embedding with the one-hot pre-mix of layer 0.
    fn embed(&self, tokens: &[u32]) -> Result<Self::Streams>;
    fn rows(&self, s: &Self::Streams) -> usize;
    /// The context of a run of `rows` rows from `pos0` over the blocks `range`.
    fn begin(&self, lane: &Self::Lane, range: Range<usize>, pos0: usize, rows: usize) -> Result<Self::Ctx>;
    /// Adds layer `layer`'s Engram to the streams (before its mixes and before a DSpark tap; pitfall 4).
    fn engram(
        &self,
        layer: usize,
        s: &mut Self::Streams,
        ids: Option<&[Vec<u64>]>,
        ahead: Option<&ChunkRows>,
    ) -> Result<()>;
    /// The DSpark tap of the streams, or `None` where this model or backend drafts nothing.
    fn tap(&self, s: &Self::Streams) -> Result<Option<Self::Tap>>;
    /// Attention then MoE of layer `layer` between hc collapse and expand, on `s` in place.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        layer: usize,
        s: &mut Self::Streams,
        ctx: &mut Self::Ctx,
        run_compressor: bool,
        lane: &mut Self::Lane,
        shared: &mut Self::Shared,
    ) -> Result<()>;
    /// Feeds the KV source at the encoder/decoder boundary its compressed rows of a buffered chunk.
    fn compress_source(&self, layer: usize, s: &Self::Streams, pos0: usize, lane: &mut Self::Lane) -> Result<()>;
    /// Appends rows to the lane's replay buffer and keeps its newest `window_size`.
    fn buffer_replay(&self, lane: &mut Self::Lane, pos0: usize, s: Self::Streams, ids: EngramIds) -> Result<()>;
    /// Takes the replay buffer: its first position, rows and their Engram ids.
    fn take_replay(&self, lane: &mut Self::Lane) -> Option<(usize, Self::Streams, EngramIds)>;
    /// Seeds the draft rings from the taps of rows `pos0..pos0 + rows`.
    fn seed_drafts(&self, lane: &mut Self::Lane, pos0: usize, taps: &[Self::Tap], rows: usize) -> Result<()>;
    /// Logits of every row, or of the last row only.
    fn head(&self, s: &Self::Streams, last_only: bool) -> Result<Self::Logits>;
    /// The logits on the host, a vector per row.
    fn host_logits(&self, l: Self::Logits) -> Result<Vec<Vec<f32>>>;
    /// Remembers what the verify window `armed` is about to overwrite; `None` forgets the last one.
    fn arm(&self, lane: &mut Self::Lane, armed: Option<Armed>) -> Result<()>;
    /// Puts back what the armed window's rows past its first `keep` overwrote (positions and history are the plan's).
    fn disarm(&self, lane: &mut Self::Lane, keep: usize) -> Result<Armed>;
    /// Runs one decode step of `rows` rows (a backend may capture and replay it as a graph).
    fn decode_step<R>(&self, _rows: usize, step: impl FnOnce() -> Result<R>) -> Result<R> {
        step()
    }
}

fn check_tokens(cfg: &Config, tokens: &[u32]) -> Result<()> {
    match tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
        Some(t) => {
            Err(CoreError::Invalid(format!("token id {t} is outside the vocabulary of {}", cfg.vocab_size)).into())
        }
        None => Ok(()),
    }
}

/// Engram ids of `tokens`, per Engram layer and row, advancing the lane's n-gram history.
pub fn engram_ids<B: Backend>(b: &B, lane: &mut B::Lane, tokens: &[u32]) -> Result<EngramIds> {
    let (Some(h), Some(hist)) = (b.hasher(), lane.engram_history()) else { return Ok(Vec::new()) };
    let ids = h.hash_tokens(hist, tokens, None).map_err(|e| CoreError::Invalid(format!("engram: {e}")))?;
    let n = h.layout().n_layers();
    Ok((0..n).map(|l| (0..tokens.len()).map(|t| ids.at(l, t).to_vec()).collect()).collect())
}

/// Runs the blocks of `range` in order over `s` at positions `pos0..`; the DSpark taps, in target order.
fn run_blocks<B: Backend>(
    b: &B,
    range: Range<usize>,
    s: &mut B::Streams,
    lane: &mut B::Lane,
    pos0: usize,
    (ids, ahead): (&[Vec<Vec<u64>>], &[ChunkRows]),
    replay_pass: bool,
) -> Result<Vec<B::Tap>> {
    let cfg = b.cfg();
    let mut ctx = b.begin(lane, range.clone(), pos0, b.rows(s))?;
    let mut shared = B::Shared::default();
    let mut taps = Vec::new();
    let first = range.start;
    for layer in range {
        let k = b.hasher().and_then(|h| h.layout().layer_index(layer));
        b.engram(layer, s, k.and_then(|k| ids.get(k)).map(Vec::as_slice), k.and_then(|k| ahead.get(k)))?;
        if cfg.dspark_target_layer_ids.contains(&layer) {
            taps.extend(b.tap(s)?);
        }
        // The replay pass's first layer already compressed these rows when they were buffered.
        b.block(layer, s, &mut ctx, !(replay_pass && layer == first), lane, &mut shared)?;
    }
    Ok(taps)
}

/// Feeds one prompt chunk (Engram rows of this chunk fetched `ahead`, or none); on the `last` chunk, the logits of the prompt's final row.
pub fn prefill<B: Backend>(
    b: &B,
    lane: &mut B::Lane,
    tokens: &[u32],
    last: bool,
    ahead: &[ChunkRows],
) -> Result<Option<Vec<f32>>> {
    if tokens.is_empty() {
        return Err(CoreError::Invalid("prefill of an empty chunk".into()).into());
    }
    check_tokens(b.cfg(), tokens)?;
    b.arm(lane, None)?;
    let pos0 = *lane.pos_mut();
    let ids = engram_ids(b, lane, tokens)?;
    let mut s = b.embed(tokens)?;
    let (n, rows) = (b.cfg().n_layers, tokens.len());
    if !b.replay() {
        let taps = run_blocks(b, 0..n, &mut s, lane, pos0, (&ids, ahead), false)?;
        b.seed_drafts(lane, pos0, &taps, rows)?;
        *lane.pos_mut() += rows;
        return if last { Ok(Some(last_row(b, &s)?)) } else { Ok(None) };
    }
    let split = n / 2;
    run_blocks(b, 0..split, &mut s, lane, pos0, (&ids, ahead), false)?;
    b.compress_source(split, &s, pos0, lane)?;
    *lane.pos_mut() += rows;
    b.buffer_replay(lane, pos0, s, ids)?;
    if !last {
        return Ok(None);
    }
    let (start, mut s, ids) = b.take_replay(lane).expect("just buffered");
    for floor in &mut lane.window_floor_mut()[split..n] {
        *floor = start;
    }
    let taps = run_blocks(b, split..n, &mut s, lane, start, (&ids, ahead), true)?;
    let replayed = b.rows(&s);
    b.seed_drafts(lane, start, &taps, replayed)?;
    Ok(Some(last_row(b, &s)?))
}

fn last_row<B: Backend>(b: &B, s: &B::Streams) -> Result<Vec<f32>> {
    let logits = b.head(s, true)?;
    Ok(b.host_logits(logits)?.remove(0))
}

/// Runs rows after the prompt (one decode token, or a few verify rows) through every layer; logits per row.
pub fn decode<B: Backend>(b: &B, lane: &mut B::Lane, tokens: &[u32], ahead: &[ChunkRows]) -> Result<Vec<Vec<f32>>> {
    b.arm(lane, None)?;
    decode_rows(b, lane, tokens, ahead, true)
}

/// [`decode`] of a verify window `[t, d1 .. dk]` that [`rewind`] can cut back to the rows it accepts.
pub fn verify<B: Backend>(b: &B, lane: &mut B::Lane, tokens: &[u32], ahead: &[ChunkRows]) -> Result<Vec<Vec<f32>>> {
    let cfg = b.cfg();
    if tokens.len() > cfg.window_size {
        let what = format!("a verify window of {} rows is wider than the window of {}", tokens.len(), cfg.window_size);
        return Err(CoreError::Invalid(what).into());
    }
    if b.opts().quirks.stale_index_keys {
        return Err(CoreError::Invalid("verify windows need the stale-index-keys quirk off".into()).into());
    }
    let history = lane.engram_history().map(|h| h.clone());
    let pos0 = *lane.pos_mut();
    b.arm(lane, Some(Armed { pos0, tokens: tokens.to_vec(), history }))?;
    // Graphs are for plain steps: a window keeps its compressor rows for the rewind.
    let rows = decode_rows(b, lane, tokens, ahead, false);
    if rows.is_err() {
        b.arm(lane, None)?;
    }
    rows
}

/// Keeps the first `keep` rows of the last verify window and drops the rest, as if only those had been decoded.
pub fn rewind<B: Backend>(b: &B, lane: &mut B::Lane, keep: usize) -> Result<()> {
    let armed = b.disarm(lane, keep)?;
    *lane.pos_mut() = armed.pos0 + keep;
    if let (Some(saved), Some(h)) = (armed.history, lane.engram_history()) {
        *h = saved;
        engram_ids(b, lane, &armed.tokens[..keep])?;
    }
    Ok(())
}

fn decode_rows<B: Backend>(
    b: &B,
    lane: &mut B::Lane,
    tokens: &[u32],
    ahead: &[ChunkRows],
    graphs: bool,
) -> Result<Vec<Vec<f32>>> {
    if lane.replay_pending() {
        return Err(CoreError::Invalid("decode before the prompt's last chunk was prefilled".into()).into());
    }
    if tokens.is_empty() {
        return Err(CoreError::Invalid("decode of no tokens".into()).into());
    }
    check_tokens(b.cfg(), tokens)?;
    let pos0 = *lane.pos_mut();
    let ids = engram_ids(b, lane, tokens)?;
    let n = b.cfg().n_layers;
    let step = |lane: &mut B::Lane| {
        let mut s = b.embed(tokens)?;
        let taps = run_blocks(b, 0..n, &mut s, lane, pos0, (&ids, ahead), false)?;
        Ok((b.head(&s, false)?, taps))
    };
    let (logits, taps) = if graphs { b.decode_step(tokens.len(), || step(lane))? } else { step(lane)? };
    // Seeding reads the taps back on the host, so it runs after a captured step, never inside it.
    b.seed_drafts(lane, pos0, &taps, tokens.len())?;
    *lane.pos_mut() += tokens.len();
    b.host_logits(logits)
}
