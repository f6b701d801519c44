//! The family trait: what the lane host needs from a model, and nothing about HTTP.

use std::path::Path;

/// One model family as the lane host drives it; the host owns it on its scheduler thread.
pub trait Family: Send + 'static {
    /// A sequence's state (its caches); one per lane.
    type Lane: Send;

    /// A fresh lane; fails (that request only) when its caches cannot be allocated.
    fn new_lane(&self) -> Result<Self::Lane, String>;
    /// A copy of a lane that continues exactly as the original would (the prompt cache's snapshot).
    fn fork(&self, lane: &Self::Lane) -> Result<Self::Lane, String>;
    fn vocab_size(&self) -> usize;
    fn eos_token(&self) -> u32;
    /// Longest prompt plus generation a lane may hold.
    fn max_context(&self) -> usize;
    /// Feeds a prompt chunk; returns the last row's logits when `last`.
    fn prefill(&self, lane: &mut Self::Lane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, String>;
    /// Feeds rows after the prompt; returns each row's logits.
    fn decode(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, String>;

    /// What a prompt's rows fetched ahead of its chunks are held in (Engram read-ahead); `()` for families without.
    type Prefetch: Send;
    /// Starts fetching what the prompt's chunks (of these lengths, after `lane`'s history; `None`: a fresh lane's) will read; `None`: nothing to fetch.
    fn prefetch(
        &self,
        _lane: Option<&Self::Lane>,
        _prompt: &[u32],
        _chunks: &[usize],
    ) -> Result<Option<Self::Prefetch>, String> {
        Ok(None)
    }
    /// [`Family::prefill`] of the next prefetched chunk.
    fn prefill_prefetched(
        &self,
        lane: &mut Self::Lane,
        tokens: &[u32],
        last: bool,
        _pf: &mut Self::Prefetch,
    ) -> Result<Option<Vec<f32>>, String> {
        self.prefill(lane, tokens, last)
    }
    /// Starts fetching what decoding `tokens` next on `lane` will read, as soon as they are sampled; `None`: nothing to fetch.
    fn prefetch_decode(&self, _lane: &Self::Lane, _tokens: &[u32]) -> Option<Self::Prefetch> {
        None
    }
    /// [`Family::decode`] of the rows `prefetch_decode` fetched for.
    fn decode_prefetched(
        &self,
        lane: &mut Self::Lane,
        tokens: &[u32],
        _pf: &mut Self::Prefetch,
    ) -> Result<Vec<Vec<f32>>, String> {
        self.decode(lane, tokens)
    }
}

/// Read-ahead depth (chunks) and parts per chunk of a prompt's Engram rows; the shared reader pool grows to the parts (docs/engram-disk.md).
const ENGRAM_AHEAD: (usize, usize) = (4, 64);

/// dsv41's read-ahead after a lane's n-gram history (`None`: a fresh lane's); only tables read from disk (`--engram-io mmap|direct`) are fetched, mapped ones are in memory.
fn dsv41_prefetch(
    m: &tf_dsv41::Model,
    hist: Option<Option<&tf_engram::NgramHistory>>,
    prompt: &[u32],
    chunks: &[usize],
) -> Result<Option<tf_dsv41::model::Prefetch>, String> {
    if m.opts.engram_io.is_none() {
        return Ok(None);
    }
    let fresh = m.hasher.as_ref().map(tf_engram::NgramHasher::history);
    m.prefetch_after(hist.unwrap_or(fresh.as_ref()), prompt, chunks, ENGRAM_AHEAD).map_err(|e| e.to_string())
}

/// A decode step's rows as one chunk; a read-ahead that cannot start leaves the step to read its rows itself.
fn dsv41_prefetch_decode(
    m: &tf_dsv41::Model,
    hist: Option<&tf_engram::NgramHistory>,
    tokens: &[u32],
) -> Option<tf_dsv41::model::Prefetch> {
    dsv41_prefetch(m, Some(hist), tokens, &[tokens.len()]).ok().flatten()
}

/// The read-ahead methods of a dsv41 backend `$m`, whose `$cpu` gives the CPU model holding the tables and hasher.
macro_rules! dsv41_read_ahead {
    ($m:path, $cpu:path) => {
        type Prefetch = tf_dsv41::model::Prefetch;

        fn prefetch(
            &self,
            lane: Option<&Self::Lane>,
            prompt: &[u32],
            chunks: &[usize],
        ) -> Result<Option<Self::Prefetch>, String> {
            let Some(cpu) = $cpu(self) else { return Ok(None) };
            dsv41_prefetch(cpu, lane.map(|l| l.engram.as_ref()), prompt, chunks)
        }

        fn prefill_prefetched(
            &self,
            lane: &mut Self::Lane,
            tokens: &[u32],
            last: bool,
            pf: &mut Self::Prefetch,
        ) -> Result<Option<Vec<f32>>, String> {
            <$m>::prefill_prefetched(self, lane, tokens, last, pf).map_err(|e| e.to_string())
        }

        fn prefetch_decode(&self, lane: &Self::Lane, tokens: &[u32]) -> Option<Self::Prefetch> {
            dsv41_prefetch_decode($cpu(self)?, lane.engram.as_ref(), tokens)
        }

        fn decode_prefetched(
            &self,
            lane: &mut Self::Lane,
            tokens: &[u32],
            pf: &mut Self::Prefetch,
        ) -> Result<Vec<Vec<f32>>, String> {
            <$m>::decode_prefetched(self, lane, tokens, pf).map_err(|e| e.to_string())
        }
    };
}

impl Family for tf_dsv41::Model {
    type Lane = tf_dsv41::state::SeqState;

    fn new_lane(&self) -> Result<Self::Lane, String> {
        Ok(self.new_state())
    }

    fn fork(&self, lane: &Self::Lane) -> Result<Self::Lane, String> {
        Ok(lane.clone())
    }

    fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }

    fn eos_token(&self) -> u32 {
        self.cfg.eos_token_id
    }

    fn max_context(&self) -> usize {
        self.cfg.max_seq_len
    }

    fn prefill(&self, lane: &mut Self::Lane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, String> {
        tf_dsv41::Model::prefill(self, lane, tokens, last).map_err(|e| e.to_string())
    }

    fn decode(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, String> {
        tf_dsv41::Model::decode(self, lane, tokens).map_err(|e| e.to_string())
    }

    dsv41_read_ahead!(tf_dsv41::Model, Some);
}

impl Family for tf_dsv41::cuda::GpuModel {
    type Lane = tf_dsv41::cuda::GpuLane;

    fn new_lane(&self) -> Result<Self::Lane, String> {
        tf_dsv41::cuda::GpuModel::new_lane(self).map_err(|e| e.to_string())
    }

    fn fork(&self, lane: &Self::Lane) -> Result<Self::Lane, String> {
        lane.fork(self.gpu).map_err(|e| e.to_string())
    }

    fn vocab_size(&self) -> usize {
        self.cfg().vocab_size
    }

    fn eos_token(&self) -> u32 {
        self.cfg().eos_token_id
    }

    fn max_context(&self) -> usize {
        self.cfg().max_seq_len
    }

    fn prefill(&self, lane: &mut Self::Lane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, String> {
        tf_dsv41::cuda::GpuModel::prefill(self, lane, tokens, last).map_err(|e| e.to_string())
    }

    fn decode(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, String> {
        tf_dsv41::cuda::GpuModel::decode(self, lane, tokens).map_err(|e| e.to_string())
    }

    dsv41_read_ahead!(tf_dsv41::cuda::GpuModel, gpu_cpu);
}

/// The CPU model a GPU model keeps for its Engram tables and hasher.
fn gpu_cpu(m: &tf_dsv41::cuda::GpuModel) -> Option<&tf_dsv41::Model> {
    m.cpu.as_ref()
}

/// Loads the dsv41 family from a checkpoint directory.
pub fn load_dsv41(dir: &Path, opts: tf_dsv41::Options) -> Result<tf_dsv41::Model, String> {
    tf_dsv41::Model::load(dir, opts).map_err(|e| format!("{}: {e}", dir.display()))
}
