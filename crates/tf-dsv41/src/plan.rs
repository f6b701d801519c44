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

/// One lane's rows in a step: `rows` consecutive rows of the streams at positions `pos0..`, with its run context and selections.
pub struct Part<'l, B: Backend> {
    pub lane: &'l mut B::Lane,
    pub pos0: usize,
    pub rows: usize,
    pub ctx: B::Ctx,
    pub shared: B::Shared,
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
    /// The DSpark tap of each part's rows (`rows` per part, in stream order), or `None` where this model or backend drafts nothing.
    fn tap(&self, s: &Self::Streams, rows: &[usize]) -> Result<Option<Vec<Self::Tap>>>;
    /// Attention (each part on its own lane) then MoE (every row at once) of layer `layer`, on `s` in place.
    fn block(
        &self,
        layer: usize,
        s: &mut Self::Streams,
        parts: &mut [Part<'_, Self>],
        run_compressor: bool,
    ) -> Result<()>
    where
        Self: Sized;
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

/// Runs the blocks of `range` in order over `s`, whose rows are the lanes' `(lane, pos0, rows)` in order; each lane's DSpark taps, in target order.
fn run_blocks<B: Backend>(
    b: &B,
    range: Range<usize>,
    s: &mut B::Streams,
    lanes: Vec<(&mut B::Lane, usize, usize)>,
    (ids, ahead): (&[Vec<Vec<u64>>], &[ChunkRows]),
    replay_pass: bool,
) -> Result<Vec<Vec<B::Tap>>> {
    let cfg = b.cfg();
    let mut parts = Vec::with_capacity(lanes.len());
    for (lane, pos0, rows) in lanes {
        let ctx = b.begin(lane, range.clone(), pos0, rows)?;
        parts.push(Part { lane, pos0, rows, ctx, shared: B::Shared::default() });
    }
    let counts: Vec<usize> = parts.iter().map(|p| p.rows).collect();
    let mut taps: Vec<Vec<B::Tap>> = parts.iter().map(|_| Vec::new()).collect();
    let first = range.start;
    for layer in range {
        let k = b.hasher().and_then(|h| h.layout().layer_index(layer));
        b.engram(layer, s, k.and_then(|k| ids.get(k)).map(Vec::as_slice), k.and_then(|k| ahead.get(k)))?;
        if cfg.dspark_target_layer_ids.contains(&layer)
            && let Some(t) = b.tap(s, &counts)?
        {
            taps.iter_mut().zip(t).for_each(|(v, t)| v.push(t));
        }
        // The replay pass's first layer already compressed these rows when they were buffered.
        b.block(layer, s, &mut parts, !(replay_pass && layer == first))?;
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
        let taps = run_blocks(b, 0..n, &mut s, vec![(&mut *lane, pos0, rows)], (&ids, ahead), false)?;
        b.seed_drafts(lane, pos0, &taps[0], rows)?;
        *lane.pos_mut() += rows;
        return if last { Ok(Some(last_row(b, &s)?)) } else { Ok(None) };
    }
    let split = n / 2;
    run_blocks(b, 0..split, &mut s, vec![(&mut *lane, pos0, rows)], (&ids, ahead), false)?;
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
    let replayed = b.rows(&s);
    let taps = run_blocks(b, split..n, &mut s, vec![(&mut *lane, start, replayed)], (&ids, ahead), true)?;
    b.seed_drafts(lane, start, &taps[0], replayed)?;
    Ok(Some(last_row(b, &s)?))
}

fn last_row<B: Backend>(b: &B, s: &B::Streams) -> Result<Vec<f32>> {
    let logits = b.head(s, true)?;
    Ok(b.host_logits(logits)?.remove(0))
}

/// Runs rows after the prompt (one decode token, or a few verify rows) through every layer; logits per row.
pub fn decode<B: Backend>(b: &B, lane: &mut B::Lane, tokens: &[u32], ahead: &[ChunkRows]) -> Result<Vec<Vec<f32>>> {
    Ok(decode_lanes(b, &mut [lane], &[tokens], &[ahead])?.remove(0))
}

/// [`decode`] of several lanes in one step: their rows share every row-wise op (weights read once), each lane's bits as alone.
pub fn decode_lanes<B: Backend>(
    b: &B,
    lanes: &mut [&mut B::Lane],
    tokens: &[&[u32]],
    ahead: &[&[ChunkRows]],
) -> Result<Vec<Vec<Vec<f32>>>> {
    step_lanes(b, lanes, tokens, &vec![false; lanes.len()], ahead)
}

/// [`decode`] of a verify window `[t, d1 .. dk]` that [`rewind`] can cut back to the rows it accepts.
pub fn verify<B: Backend>(b: &B, lane: &mut B::Lane, tokens: &[u32], ahead: &[ChunkRows]) -> Result<Vec<Vec<f32>>> {
    Ok(verify_lanes(b, &mut [lane], &[tokens], &[ahead])?.remove(0))
}

/// [`verify`] of several lanes' windows in one step; each lane can then be cut back on its own.
pub fn verify_lanes<B: Backend>(
    b: &B,
    lanes: &mut [&mut B::Lane],
    windows: &[&[u32]],
    ahead: &[&[ChunkRows]],
) -> Result<Vec<Vec<Vec<f32>>>> {
    step_lanes(b, lanes, windows, &vec![true; lanes.len()], ahead)
}

/// Lane `i` runs `rows[i]` as a verify window where `verify[i]`, else as decode rows; after a failed step, drop its lanes (half-run).
pub fn step_lanes<B: Backend>(
    b: &B,
    lanes: &mut [&mut B::Lane],
    rows: &[&[u32]],
    verify: &[bool],
    ahead: &[&[ChunkRows]],
) -> Result<Vec<Vec<Vec<f32>>>> {
    if verify.len() != lanes.len() || rows.len() != lanes.len() || ahead.len() > lanes.len() {
        let what = format!(
            "{} lanes, {} row lists, {} verify flags, {} read-aheads",
            lanes.len(),
            rows.len(),
            verify.len(),
            ahead.len()
        );
        return Err(CoreError::Invalid(what).into());
    }
    for ((lane, t), &v) in lanes.iter().zip(rows).zip(verify) {
        check_lane(b, lane, t, v)?;
    }
    for ((lane, tokens), &v) in lanes.iter_mut().zip(rows).zip(verify) {
        let history = lane.engram_history().filter(|_| v).map(|h| h.clone());
        let pos0 = *lane.pos_mut();
        b.arm(lane, v.then(|| Armed { pos0, tokens: tokens.to_vec(), history }))?;
    }
    // Graphs are for plain steps: a window keeps its compressor rows for the rewind.
    let out = decode_rows(b, lanes, rows, ahead, !verify.contains(&true));
    if out.is_err() {
        for lane in lanes.iter_mut() {
            b.arm(lane, None)?;
        }
    }
    out
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

/// Each lane's rows after its prompt, run as one set of streams; logits per lane, per row.
fn decode_rows<B: Backend>(
    b: &B,
    lanes: &mut [&mut B::Lane],
    tokens: &[&[u32]],
    ahead: &[&[ChunkRows]],
    graphs: bool,
) -> Result<Vec<Vec<Vec<f32>>>> {
    let pos0: Vec<usize> = lanes.iter_mut().map(|l| *l.pos_mut()).collect();
    let mut ids: EngramIds = Vec::new();
    for (i, (lane, t)) in lanes.iter_mut().zip(tokens).enumerate() {
        let lane_ids = engram_ids(b, lane, t)?;
        if i == 0 {
            ids.resize(lane_ids.len(), Vec::new());
        } else if lane_ids.len() != ids.len() {
            let what = format!("lanes of one step hash {} and {} Engram layers", ids.len(), lane_ids.len());
            return Err(CoreError::Invalid(what).into());
        }
        ids.iter_mut().zip(lane_ids).for_each(|(all, mine)| all.extend(mine));
    }
    let ahead = merged_ahead(ahead);
    let all: Vec<u32> = tokens.concat();
    let n = b.cfg().n_layers;
    let step = |lanes: &mut [&mut B::Lane]| {
        let mut s = b.embed(&all)?;
        let parts = lanes.iter_mut().zip(&pos0).zip(tokens).map(|((l, &p), t)| (&mut **l, p, t.len())).collect();
        let taps = run_blocks(b, 0..n, &mut s, parts, (&ids, &ahead), false)?;
        Ok((b.head(&s, false)?, taps))
    };
    // A captured step replays one lane's buffers, so several lanes always run directly.
    let (logits, taps) =
        if graphs && lanes.len() == 1 { b.decode_step(all.len(), || step(lanes))? } else { step(lanes)? };
    // Seeding reads the taps back on the host, so it runs after a captured step, never inside it.
    for (((lane, taps), &p), t) in lanes.iter_mut().zip(&taps).zip(&pos0).zip(tokens) {
        b.seed_drafts(lane, p, taps, t.len())?;
        *lane.pos_mut() += t.len();
    }
    let mut rows = b.host_logits(logits)?.into_iter();
    Ok(tokens.iter().map(|t| rows.by_ref().take(t.len()).collect()).collect())
}

/// What a step refuses for one lane before it runs anything: a lane still in its prompt, no rows, ids outside the vocabulary, a bad window.
pub fn check_lane<B: Backend>(b: &B, lane: &B::Lane, tokens: &[u32], verify: bool) -> Result<()> {
    if lane.replay_pending() {
        return Err(CoreError::Invalid("decode before the prompt's last chunk was prefilled".into()).into());
    }
    if tokens.is_empty() {
        return Err(CoreError::Invalid("decode of no tokens".into()).into());
    }
    check_tokens(b.cfg(), tokens)?;
    let cfg = b.cfg();
    if verify && tokens.len() > cfg.window_size {
        let what = format!("a verify window of {} rows is wider than the window of {}", tokens.len(), cfg.window_size);
        return Err(CoreError::Invalid(what).into());
    }
    if verify && b.opts().quirks.stale_index_keys {
        return Err(CoreError::Invalid("verify windows need the stale-index-keys quirk off".into()).into());
    }
    Ok(())
}

/// The lanes' rows fetched ahead, one chunk per Engram layer; a lane without read-ahead reads its rows from the table.
fn merged_ahead<'a>(ahead: &[&'a [ChunkRows]]) -> std::borrow::Cow<'a, [ChunkRows]> {
    match ahead {
        [] => std::borrow::Cow::Borrowed(&[]),
        // One lane's rows serve as they are: a plain decode step copies nothing.
        [one] => std::borrow::Cow::Borrowed(*one),
        many => {
            let layers = many.iter().map(|a| a.len()).max().unwrap_or(0);
            (0..layers)
                .filter_map(|k| ChunkRows::merge(&many.iter().filter_map(|a| a.get(k)).collect::<Vec<_>>()))
                .collect()
        }
    }
}
