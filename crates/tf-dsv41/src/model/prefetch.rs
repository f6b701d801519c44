//! Engram read-ahead for a prompt (issue 7): every chunk's rows fetched on background threads before the forward.

use super::{Model, SeqState};
use crate::engram::EngramGate;
use std::collections::VecDeque;
use tf_core::{Error, Result};
use tf_engram::{ChunkRows, NgramHasher, NgramHistory, ReadAhead};

/// A prompt's Engram rows in flight: one reader per Engram layer, and the chunk lengths they were cut for.
pub struct Prefetch {
    readers: Vec<ReadAhead>,
    lens: VecDeque<usize>,
    fetched: usize,
}

impl Prefetch {
    /// How long each taken chunk waited for the disk, per Engram layer.
    pub fn waits(&self) -> Vec<&[std::time::Duration]> {
        self.readers.iter().map(ReadAhead::waits).collect()
    }

    /// Distinct rows of the chunks taken so far, over every Engram layer (under a row split, this rank's only).
    pub fn rows_fetched(&self) -> usize {
        self.fetched
    }

    /// The next chunk's rows per Engram layer; `tokens` must be that chunk's length.
    pub fn next_chunk(&mut self, tokens: usize) -> Result<Vec<ChunkRows>> {
        if self.lens.front() != Some(&tokens) {
            let msg = format!("prefetched chunks are {:?} tokens, this chunk is {tokens}", self.lens.front());
            return Err(Error::Invalid(msg));
        }
        self.lens.pop_front();
        let ahead: Vec<ChunkRows> = self
            .readers
            .iter_mut()
            .map(ReadAhead::next_chunk)
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::Invalid(e.to_string()))?;
        self.fetched += ahead.iter().map(ChunkRows::distinct).sum::<usize>();
        Ok(ahead)
    }
}

/// Hashes `prompt` after `hist` (unchanged) and starts one reader per Engram layer (`(layer, gate)`) over its chunks; `None` without Engram.
pub(crate) fn start<'a>(
    hasher: Option<&NgramHasher>,
    gates: impl Iterator<Item = (usize, &'a EngramGate)>,
    hist: Option<&NgramHistory>,
    prompt: &[u32],
    lens: &[usize],
    (depth, threads): (usize, usize),
) -> Result<Option<Prefetch>> {
    let (Some(h), Some(hist)) = (hasher, hist) else { return Ok(None) };
    if prompt.is_empty() || lens.contains(&0) || lens.iter().sum::<usize>() != prompt.len() {
        return Err(Error::Invalid(format!("prefetch: chunks {lens:?} do not cut a {}-token prompt", prompt.len())));
    }
    let mut hist = hist.clone();
    let ids = h.hash_tokens(&mut hist, prompt, None).map_err(|e| Error::Invalid(format!("engram: {e}")))?;
    let mut readers = Vec::new();
    for (layer, gate) in gates {
        let k = h.layout().layer_index(layer).expect("engram blocks have a hash layer");
        let starts = lens.iter().scan(0, |at, &n| Some((std::mem::replace(at, *at + n), n)));
        // Under a row split (tensor parallel) a rank reads only the rows it owns.
        let own = gate.split.as_ref().map(|s| s.mine());
        let mine = |id: &u64| own.as_ref().is_none_or(|r| r.contains(&(*id as usize)));
        let chunks: Vec<Vec<u64>> = starts
            .map(|(s, n)| {
                (s..s + n).flat_map(|t| ids.at(k, t).iter().copied().filter(mine).collect::<Vec<_>>()).collect()
            })
            .collect();
        readers.push((k, ReadAhead::start(gate.table.clone(), chunks, depth, threads)));
    }
    readers.sort_by_key(|(k, _)| *k);
    let readers = readers.into_iter().map(|(_, r)| r).collect();
    Ok(Some(Prefetch { readers, lens: lens.iter().copied().collect(), fetched: 0 }))
}

impl Model {
    /// Hashes the prompt from `st`'s history (unchanged) and fetches its `chunk`-token chunks `depth` ahead; `None` without Engram.
    pub fn prefetch(
        &self,
        st: &SeqState,
        prompt: &[u32],
        chunk: usize,
        ahead: (usize, usize),
    ) -> crate::plan::Result<Option<Prefetch>> {
        if chunk == 0 {
            return Err(Error::Invalid("prefetch needs a chunk size".into()).into());
        }
        let lens: Vec<usize> = (0..prompt.len()).step_by(chunk).map(|s| chunk.min(prompt.len() - s)).collect();
        self.prefetch_chunks(st, prompt, &lens, ahead)
    }

    /// [`Model::prefetch`] for chunks of the given lengths (a server's chunks, cut where its prompt cache snapshots).
    pub fn prefetch_chunks(
        &self,
        st: &SeqState,
        prompt: &[u32],
        lens: &[usize],
        ahead: (usize, usize),
    ) -> crate::plan::Result<Option<Prefetch>> {
        self.prefetch_after(st.engram.as_ref(), prompt, lens, ahead)
    }

    /// [`Model::prefetch_chunks`] after an n-gram history (the CPU's or a GPU lane's); `None` without Engram.
    pub fn prefetch_after(
        &self,
        hist: Option<&NgramHistory>,
        prompt: &[u32],
        lens: &[usize],
        ahead: (usize, usize),
    ) -> crate::plan::Result<Option<Prefetch>> {
        crate::plan::Backend::prefetch_after(self, hist, prompt, lens, ahead)
    }

    /// [`Model::decode`] of rows whose Engram rows were fetched ahead as one chunk (`prefetch_after(.., &[tokens.len()], ..)`).
    pub fn decode_prefetched(
        &self,
        st: &mut SeqState,
        tokens: &[u32],
        pf: &mut Prefetch,
    ) -> crate::plan::Result<Vec<Vec<f32>>> {
        let ahead = pf.next_chunk(tokens.len())?;
        self.decode_with(st, tokens, &ahead)
    }

    /// [`Model::prefill`] of the next chunk of a prefetched prompt: its Engram rows come from the read-ahead.
    pub fn prefill_prefetched(
        &self,
        st: &mut SeqState,
        tokens: &[u32],
        last: bool,
        pf: &mut Prefetch,
    ) -> crate::plan::Result<Option<Vec<f32>>> {
        let ahead = pf.next_chunk(tokens.len())?;
        self.prefill_with(st, tokens, last, &ahead)
    }
}
