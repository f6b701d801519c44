//! dsv41 as a `tf_family::Family`: the CPU reference and the CUDA model, with Engram read-ahead.

use crate::Error;
use std::path::Path;
use tf_family::Family;

/// Read-ahead depth (chunks) and parts per chunk of a prompt's Engram rows; the shared reader pool grows to the parts (docs/engram-disk.md).
const ENGRAM_AHEAD: (usize, usize) = (4, 64);

/// Whether a model drafts: it has DSpark stages, and the stale-index-keys quirk (which verify windows refuse) is off.
fn drafts(has_dspark: bool, opts: &crate::Options) -> bool {
    has_dspark && !opts.quirks.stale_index_keys
}

/// The first `max` of a DSpark block's drafts, as the lane host takes them.
fn first_drafts(d: crate::model::Drafts, max: usize) -> tf_family::Draft {
    let n = max.min(d.tokens.len());
    tf_family::Draft { tokens: d.tokens[..n].to_vec(), confidence: d.confidence[..n].to_vec() }
}

/// Lanes that would draft alone draft together through `many`, in groups under the prompt paths' row thresholds ([`step_groups`], `block` rows a lane); the others (no room, no prompt yet) answer as alone.
fn draft_together<F: Family<Error = Error>, E>(
    fam: &F,
    (opts, block): (&crate::Options, usize),
    (lanes, next, max): (&mut [&mut F::Lane], &[u32], &[usize]),
    pos: impl Fn(&F::Lane) -> usize,
    mut many: impl FnMut(&mut [&mut F::Lane], &[u32]) -> Result<Vec<crate::model::Drafts>, E>,
) -> Vec<Result<Option<tf_family::Draft>, Error>> {
    let together: Vec<usize> = (0..lanes.len()).filter(|&i| max[i] > 0 && pos(lanes[i]) > 0).collect();
    let mut out: Vec<Option<Result<Option<tf_family::Draft>, Error>>> = (0..lanes.len()).map(|_| None).collect();
    let groups = if fam.drafts() { step_groups(opts, &together, |_| block) } else { Vec::new() };
    for group in groups.into_iter().filter(|g| g.len() > 1) {
        let nexts: Vec<u32> = group.iter().map(|&i| next[i]).collect();
        let mut sel: Vec<&mut F::Lane> =
            lanes.iter_mut().enumerate().filter(|(i, _)| group.contains(i)).map(|(_, l)| &mut **l).collect();
        // It fails only before any lane moves (a token outside the vocabulary): each lane then answers alone.
        if let Ok(drafts) = many(&mut sel, &nexts) {
            for (&i, d) in group.iter().zip(drafts) {
                out[i] = Some(Ok(Some(first_drafts(d, max[i]))));
            }
        }
    }
    let each = lanes.iter_mut().zip(next).zip(max).zip(out);
    each.map(|(((l, &n), &m), o)| o.unwrap_or_else(|| fam.draft(l, n, m))).collect()
}

/// dsv41's read-ahead after a lane's n-gram history (`None`: a fresh lane's); only tables read from disk (`--engram-io mmap|direct`) are fetched, mapped ones are in memory.
fn dsv41_prefetch<M: crate::plan::Backend>(
    m: &M,
    hist: Option<Option<&tf_engram::NgramHistory>>,
    prompt: &[u32],
    chunks: &[usize],
) -> Result<Option<crate::model::Prefetch>, Error> {
    if m.opts().engram_io.is_none() {
        return Ok(None);
    }
    let fresh = crate::plan::Backend::hasher(m).map(tf_engram::NgramHasher::history);
    m.prefetch_after(hist.unwrap_or(fresh.as_ref()), prompt, chunks, ENGRAM_AHEAD)
}

/// A decode step's rows as one chunk; a read-ahead that cannot start leaves the step to read its rows itself.
fn dsv41_prefetch_decode<M: crate::plan::Backend>(
    m: &M,
    hist: Option<&tf_engram::NgramHistory>,
    tokens: &[u32],
) -> Option<crate::model::Prefetch> {
    dsv41_prefetch(m, Some(hist), tokens, &[tokens.len()]).ok().flatten()
}

/// Every lane's rows in one plan step; a lane whose own checks or read-ahead fail gets that error and stays out of the step.
fn dsv41_step_lanes<M: crate::plan::Backend>(
    m: &M,
    lanes: &mut [&mut M::Lane],
    rows: &[&[u32]],
    verify: &[bool],
    pfs: &mut [Option<crate::model::Prefetch>],
) -> Vec<Result<Vec<Vec<f32>>, Error>> {
    let mut out: Vec<Option<Result<Vec<Vec<f32>>, Error>>> = (0..lanes.len()).map(|_| None).collect();
    let mut ahead = vec![Vec::new(); lanes.len()];
    for (i, lane) in lanes.iter_mut().enumerate() {
        let fetched = match pfs.get_mut(i).and_then(Option::as_mut) {
            Some(pf) if !verify[i] => pf.next_chunk(rows[i].len()).map_err(Error::from),
            _ => Ok(Vec::new()),
        };
        match fetched.and_then(|a| crate::plan::check_lane(m, lane, rows[i], verify[i]).map(|()| a)) {
            Ok(a) => ahead[i] = a,
            Err(e) => out[i] = Some(Err(e)),
        }
    }
    let run: Vec<usize> = (0..lanes.len()).filter(|&i| out[i].is_none()).collect();
    let mut taken: Vec<Option<&mut M::Lane>> = lanes.iter_mut().map(|l| Some(&mut **l)).collect();
    for group in step_groups(m.opts(), &run, |i| rows[i].len()) {
        let mut step: Vec<&mut M::Lane> = group.iter().map(|&i| taken[i].take().expect("one group per lane")).collect();
        let sel_rows: Vec<&[u32]> = group.iter().map(|&i| rows[i]).collect();
        let sel_verify: Vec<bool> = group.iter().map(|&i| verify[i]).collect();
        let aheads: Vec<&[tf_engram::ChunkRows]> = group.iter().map(|&i| ahead[i].as_slice()).collect();
        match crate::plan::step_lanes(m, &mut step, &sel_rows, &sel_verify, &aheads) {
            Ok(logits) => group.iter().zip(logits).for_each(|(&i, l)| out[i] = Some(Ok(l))),
            Err(e) => {
                // The step's lanes were all part way through it: each fails, the first with the cause itself.
                let msg = e.to_string();
                let mut e = Some(e);
                for &i in &group {
                    let err = e
                        .take()
                        .unwrap_or_else(|| tf_core::Error::Invalid(format!("a batched step failed: {msg}")).into());
                    out[i] = Some(Err(err));
                }
            }
        }
    }
    out.into_iter().map(|r| r.expect("every lane ran or failed")).collect()
}

/// `run` cut into steps whose rows stay below the smallest prompt-path row threshold, or of one lane: a lane's kernels follow its own rows.
pub fn step_groups(opts: &crate::Options, run: &[usize], rows: impl Fn(usize) -> usize) -> Vec<Vec<usize>> {
    let limit = [opts.exl3_prompt_gemm, opts.prefill_mxfp4.map(|p| p.min_rows)].into_iter().flatten().min();
    let Some(limit) = limit else { return if run.is_empty() { Vec::new() } else { vec![run.to_vec()] } };
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut total = 0;
    for &i in run {
        let n = rows(i);
        match groups.last_mut() {
            Some(g) if n < limit && total + n < limit => g.push(i),
            _ => {
                groups.push(vec![i]);
                total = 0;
            }
        }
        total += n;
    }
    groups
}

/// The read-ahead methods of a dsv41 backend `$m` (a [`crate::plan::Backend`]).
macro_rules! dsv41_read_ahead {
    ($m:path) => {
        type Prefetch = crate::model::Prefetch;

        fn prefetch(
            &self,
            lane: Option<&Self::Lane>,
            prompt: &[u32],
            chunks: &[usize],
        ) -> Result<Option<Self::Prefetch>, Error> {
            dsv41_prefetch(self, lane.map(|l| l.engram.as_ref()), prompt, chunks)
        }

        fn prefill_prefetched(
            &self,
            lane: &mut Self::Lane,
            tokens: &[u32],
            last: bool,
            pf: &mut Self::Prefetch,
        ) -> Result<Option<Vec<f32>>, Error> {
            <$m>::prefill_prefetched(self, lane, tokens, last, pf)
        }

        fn prefetch_decode(&self, lane: &Self::Lane, tokens: &[u32]) -> Option<Self::Prefetch> {
            dsv41_prefetch_decode(self, lane.engram.as_ref(), tokens)
        }

        fn decode_prefetched(
            &self,
            lane: &mut Self::Lane,
            tokens: &[u32],
            pf: &mut Self::Prefetch,
        ) -> Result<Vec<Vec<f32>>, Error> {
            <$m>::decode_prefetched(self, lane, tokens, pf)
        }

        fn batches(&self) -> bool {
            true
        }

        fn step_lanes(
            &self,
            lanes: &mut [&mut Self::Lane],
            rows: &[&[u32]],
            verify: &[bool],
            pfs: &mut [Option<Self::Prefetch>],
        ) -> Vec<Result<Vec<Vec<f32>>, Error>> {
            dsv41_step_lanes(self, lanes, rows, verify, pfs)
        }
    };
}

impl Family for crate::Model {
    type Lane = crate::state::SeqState;
    type Error = Error;

    fn new_lane(&self) -> Result<Self::Lane, Error> {
        Ok(self.new_state())
    }

    fn fork(&self, lane: &Self::Lane) -> Result<Self::Lane, Error> {
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

    fn prefill(&self, lane: &mut Self::Lane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, Error> {
        crate::Model::prefill(self, lane, tokens, last)
    }

    fn decode(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Error> {
        crate::Model::decode(self, lane, tokens)
    }

    fn drafts(&self) -> bool {
        drafts(self.dspark.is_some(), &self.opts)
    }

    fn draft(&self, lane: &mut Self::Lane, next: u32, max: usize) -> Result<Option<tf_family::Draft>, Error> {
        if !Family::drafts(self) || max == 0 {
            return Ok(None);
        }
        Ok(Some(first_drafts(crate::Model::draft(self, lane, next)?, max)))
    }

    fn draft_lanes(
        &self,
        lanes: &mut [&mut Self::Lane],
        next: &[u32],
        max: &[usize],
    ) -> Vec<Result<Option<tf_family::Draft>, Error>> {
        let many = |sel: &mut [&mut crate::state::SeqState], n: &[u32]| crate::Model::draft_lanes(self, sel, n);
        draft_together(self, (&self.opts, self.cfg.dspark_block_size), (lanes, next, max), |l| l.pos, many)
    }

    fn verify(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Error> {
        crate::Model::verify(self, lane, tokens)
    }

    fn rewind(&self, lane: &mut Self::Lane, keep: usize) -> Result<(), Error> {
        crate::Model::rewind(self, lane, keep)
    }

    dsv41_read_ahead!(crate::Model);
}

impl Family for crate::cuda::GpuModel {
    type Lane = crate::cuda::GpuLane;
    type Error = Error;

    fn new_lane(&self) -> Result<Self::Lane, Error> {
        crate::cuda::GpuModel::new_lane(self).map_err(Error::from)
    }

    fn fork(&self, lane: &Self::Lane) -> Result<Self::Lane, Error> {
        lane.fork(self.gpu).map_err(Error::from)
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

    fn prefill(&self, lane: &mut Self::Lane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, Error> {
        crate::cuda::GpuModel::prefill(self, lane, tokens, last)
    }

    fn decode(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Error> {
        crate::cuda::GpuModel::decode(self, lane, tokens)
    }

    fn drafts(&self) -> bool {
        drafts(self.dspark.is_some(), &self.opts)
    }

    fn draft(&self, lane: &mut Self::Lane, next: u32, max: usize) -> Result<Option<tf_family::Draft>, Error> {
        if !Family::drafts(self) || max == 0 {
            return Ok(None);
        }
        Ok(Some(first_drafts(crate::cuda::GpuModel::draft(self, lane, next)?, max)))
    }

    fn draft_lanes(
        &self,
        lanes: &mut [&mut Self::Lane],
        next: &[u32],
        max: &[usize],
    ) -> Vec<Result<Option<tf_family::Draft>, Error>> {
        let many = |sel: &mut [&mut crate::cuda::GpuLane], n: &[u32]| crate::cuda::GpuModel::draft_lanes(self, sel, n);
        draft_together(self, (&self.opts, self.cfg().dspark_block_size), (lanes, next, max), |l| l.pos, many)
    }

    fn verify(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Error> {
        crate::cuda::GpuModel::verify(self, lane, tokens)
    }

    fn rewind(&self, lane: &mut Self::Lane, keep: usize) -> Result<(), Error> {
        crate::cuda::GpuModel::rewind(self, lane, keep)
    }

    dsv41_read_ahead!(crate::cuda::GpuModel);
}

impl<F: crate::tp::lockstep::Rank> Family for crate::tp::lockstep::Leader<F> {
    type Lane = crate::tp::lockstep::TpLane;
    type Error = Error;
    type Prefetch = crate::tp::lockstep::TpPrefetch;

    fn prefetch(
        &self,
        lane: Option<&Self::Lane>,
        prompt: &[u32],
        chunks: &[usize],
    ) -> Result<Option<Self::Prefetch>, Error> {
        crate::tp::lockstep::Leader::prefetch(self, lane, prompt, chunks)
    }

    fn prefill_prefetched(
        &self,
        lane: &mut Self::Lane,
        tokens: &[u32],
        last: bool,
        pf: &mut Self::Prefetch,
    ) -> Result<Option<Vec<f32>>, Error> {
        crate::tp::lockstep::Leader::prefill_with(self, lane, tokens, last, Some(pf))
    }

    fn new_lane(&self) -> Result<Self::Lane, Error> {
        crate::tp::lockstep::Leader::new_lane(self)
    }

    fn fork(&self, lane: &Self::Lane) -> Result<Self::Lane, Error> {
        crate::tp::lockstep::Leader::fork(self, lane)
    }

    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn eos_token(&self) -> u32 {
        self.model.eos_token()
    }

    fn max_context(&self) -> usize {
        self.model.max_context()
    }

    fn prefill(&self, lane: &mut Self::Lane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, Error> {
        crate::tp::lockstep::Leader::prefill(self, lane, tokens, last)
    }

    fn decode(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Error> {
        crate::tp::lockstep::Leader::decode(self, lane, tokens, false)
    }

    fn drafts(&self) -> bool {
        Family::drafts(&self.model)
    }

    fn draft(&self, lane: &mut Self::Lane, next: u32, max: usize) -> Result<Option<tf_family::Draft>, Error> {
        if !self.drafts() || max == 0 {
            return Ok(None);
        }
        let d = crate::tp::lockstep::Leader::draft(self, lane, next)?;
        Ok(d.map(|d| first_drafts(crate::model::Drafts { tokens: d.tokens, confidence: d.confidence }, max)))
    }

    fn verify(&self, lane: &mut Self::Lane, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Error> {
        crate::tp::lockstep::Leader::decode(self, lane, tokens, true)
    }

    fn rewind(&self, lane: &mut Self::Lane, keep: usize) -> Result<(), Error> {
        crate::tp::lockstep::Leader::rewind(self, lane, keep)
    }

    fn batches(&self) -> bool {
        Family::batches(&self.model)
    }

    fn step_lanes(
        &self,
        lanes: &mut [&mut Self::Lane],
        rows: &[&[u32]],
        verify: &[bool],
        _pfs: &mut [Option<Self::Prefetch>],
    ) -> Vec<Result<Vec<Vec<f32>>, Error>> {
        crate::tp::lockstep::Leader::step_lanes(self, lanes, rows, verify)
    }
}

/// Loads the dsv41 family from a checkpoint directory.
pub fn load_dsv41(dir: &Path, opts: crate::Options) -> Result<crate::Model, Error> {
    crate::Model::load(dir, opts).map_err(|source| Error::Load { dir: dir.to_path_buf(), source })
}

/// A dsv41 model loaded for serving, on the CPU or one GPU: what a server starts its lane host with.
pub enum Loaded {
    Cpu(Box<crate::Model>),
    Cuda(Box<crate::cuda::GpuModel>),
}

impl Loaded {
    /// Loads `dir` on the CPU (`gpu: None`) or on GPU `n` (`graphs`: each decode step as one CUDA graph).
    pub fn load(dir: &Path, opts: crate::Options, gpu: Option<usize>, graphs: bool) -> Result<Loaded, Error> {
        let Some(n) = gpu else { return load_dsv41(dir, opts).map(|m| Loaded::Cpu(Box::new(m))) };
        let gpu = crate::cuda::open_gpu(n).map_err(|source| Error::OpenGpu { ordinal: n, source })?;
        let mut model = crate::cuda::GpuModel::load(dir, opts, gpu)?;
        model.graphs = graphs;
        Ok(Loaded::Cuda(Box::new(model)))
    }

    pub fn bos(&self) -> u32 {
        match self {
            Loaded::Cpu(m) => m.cfg.bos_token_id,
            Loaded::Cuda(m) => m.cfg().bos_token_id,
        }
    }
}
