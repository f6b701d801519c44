#![doc = include_str!("../README.md")]

/// One model family as the lane host drives it; the host owns it on its scheduler thread.
pub trait Family: Send + 'static {
    /// A sequence's state (its caches); one per lane.
    type Lane: Send;
    /// What a step can fail with; the lane host reports it to that request only, by its message.
    type Error: std::error::Error + Send + Sync + 'static;

    /// A fresh lane; fails (that request only) when its caches cannot be allocated.
    fn new_lane(&self) -> Result<Self::Lane, Self::Error>;
    /// A copy of a lane that continues exactly as the original would (the prompt cache's snapshot).
    fn fork(&self, lane: &Self::Lane) -> Result<Self::Lane, Self::Error>;
    fn vocab_size(&self) -> usize;
    fn eos_token(&self) -> u32;
    /// Longest prompt plus generation a lane may hold.
    fn max_context(&self) -> usize;
    /// Feeds a prompt chunk; returns the last row's logits when `last`.
    fn prefill(&self, lane: &mut Self::Lane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, Self::Error>;
    /// Feeds rows after the prompt; returns each row's logits.
    fn decode(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Self::Error>;

    /// Whether [`Family::draft`] can give drafts (the host measures window costs and drafts only then).
    fn drafts(&self) -> bool {
        false
    }
    /// Up to `max` draft tokens for the positions after `next` (the lane's next token), each with a confidence logit; `None`: this family drafts nothing.
    fn draft(&self, _lane: &mut Self::Lane, _next: u32, _max: usize) -> Result<Option<Draft>, Self::Error> {
        Ok(None)
    }
    /// [`Family::draft`] of several lanes (`next[i]`, `max[i]` each), each lane's result as alone, bit for bit.
    fn draft_lanes(
        &self,
        lanes: &mut [&mut Self::Lane],
        next: &[u32],
        max: &[usize],
    ) -> Vec<Result<Option<Draft>, Self::Error>> {
        assert!(next.len() == lanes.len() && max.len() == lanes.len(), "one of each per lane");
        lanes.iter_mut().zip(next).zip(max).map(|((lane, &n), &m)| self.draft(lane, n, m)).collect()
    }
    /// A verify window `[next, d1 .. dk]`: [`Family::decode`] that [`Family::rewind`] can cut back.
    fn verify(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Self::Error> {
        self.decode(lane, tokens)
    }
    /// Keeps the first `keep` rows of the last verify window, as if only they had been decoded (called only by families that draft).
    fn rewind(&self, _lane: &mut Self::Lane, _keep: usize) -> Result<(), Self::Error> {
        unreachable!("rewind is called only after a draft, and this family drafts nothing")
    }

    /// What a prompt's rows fetched ahead of its chunks are held in (Engram read-ahead); `()` for families without.
    type Prefetch: Send;
    /// Starts fetching what the prompt's chunks (of these lengths, after `lane`'s history; `None`: a fresh lane's) will read; `None`: nothing to fetch.
    fn prefetch(
        &self,
        _lane: Option<&Self::Lane>,
        _prompt: &[u32],
        _chunks: &[usize],
    ) -> Result<Option<Self::Prefetch>, Self::Error> {
        Ok(None)
    }
    /// [`Family::prefill`] of the next prefetched chunk.
    fn prefill_prefetched(
        &self,
        lane: &mut Self::Lane,
        tokens: &[u32],
        last: bool,
        _pf: &mut Self::Prefetch,
    ) -> Result<Option<Vec<f32>>, Self::Error> {
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
    ) -> Result<Vec<Vec<f32>>, Self::Error> {
        self.decode(lane, tokens)
    }
    /// Whether [`Family::step_lanes`] runs its lanes as one step (the host then gives it every decoding lane of a round).
    fn batches(&self) -> bool {
        false
    }
    /// Lane `i` runs `rows[i]`: a verify window where `verify[i]`, else decode rows (`pfs[i]`: their read-ahead); results as alone, bit for bit.
    fn step_lanes(
        &self,
        lanes: &mut [&mut Self::Lane],
        rows: &[&[u32]],
        verify: &[bool],
        pfs: &mut [Option<Self::Prefetch>],
    ) -> Vec<Result<Vec<Vec<f32>>, Self::Error>> {
        assert!(
            rows.len() == lanes.len() && verify.len() == lanes.len() && pfs.len() == lanes.len(),
            "one of each per lane"
        );
        let each = lanes.iter_mut().zip(rows).zip(verify).zip(pfs.iter_mut());
        each.map(|(((lane, rows), &v), pf)| match (v, pf) {
            (true, _) => self.verify(lane, rows),
            (false, Some(pf)) => self.decode_prefetched(lane, rows, pf),
            (false, None) => self.decode(lane, rows),
        })
        .collect()
    }
}

/// Draft tokens for the positions after a lane's next token, and the drafter's confidence logit of each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Draft {
    pub tokens: Vec<u32>,
    /// `sigmoid(confidence[i])` estimates the chance that `tokens[i]` is accepted once `tokens[..i]` are.
    pub confidence: Vec<f32>,
}
