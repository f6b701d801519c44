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
}

/// Loads the dsv41 family from a checkpoint directory.
pub fn load_dsv41(dir: &Path, opts: tf_dsv41::Options) -> Result<tf_dsv41::Model, String> {
    tf_dsv41::Model::load(dir, opts).map_err(|e| format!("{}: {e}", dir.display()))
}
