//! The lane host: one scheduler thread owns the model; each running request holds a lane (its caches).

mod family;
mod metrics;
mod prefix;
mod sample;
mod sched;
pub mod spec;
pub mod verify;

pub use family::{Family, load_dsv41};
pub use metrics::{Metrics, Outcome};
pub use prefix::PrefixCache;
pub use sample::{Rng, SamplingParams, argmax, biased, distribution, draw, log_softmax, sample, top_logprobs};

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Instant;

/// Capacity of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Sequences running at once.
    pub max_lanes: usize,
    /// Decoding lanes one forward step runs together (1: one lane a step, as before lanes were batched).
    pub max_step_lanes: usize,
    /// Requests waiting for a lane before new ones are refused.
    pub max_queue: usize,
    /// Prompt tokens waiting in the queue before new requests are refused.
    pub max_queued_tokens: usize,
    /// Prompt plus requested completion tokens over all running lanes; admission waits past it.
    pub max_active_tokens: usize,
    /// Prompt rows per prefill step, so decode rounds of other lanes are not starved by a long prompt.
    pub prefill_chunk: usize,
    pub admission: Admission,
    /// Prompt-cache granularity in tokens.
    pub prefix_block: usize,
    /// Tokens held in prompt-cache snapshots altogether; 0 turns the cache off.
    pub prefix_cache_tokens: usize,
    /// DSpark drafting where the family drafts and a window beats plain decode (`--no-draft` turns it off).
    pub draft: bool,
    /// Draft tokens per window: `None` picks each window's from the confidences and measured costs, `Some(k)` always `k` (at most 5).
    pub draft_len: Option<usize>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_lanes: 8,
            max_step_lanes: 64,
            max_queue: 64,
            max_queued_tokens: 1 << 22,
            max_active_tokens: usize::MAX,
            prefill_chunk: 256,
            admission: Admission::Fifo,
            prefix_block: 64,
            prefix_cache_tokens: 1 << 16,
            draft: true,
            draft_len: None,
        }
    }
}

/// Which queued request gets the next free lane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Admission {
    /// Oldest first.
    #[default]
    Fifo,
    /// Shortest prompt first (oldest among equals): lower time to first token for short requests under load.
    ShortFirst,
}

impl std::str::FromStr for Admission {
    type Err = crate::error::UnknownValue;
    fn from_str(s: &str) -> Result<Admission, Self::Err> {
        match s {
            "fifo" => Ok(Admission::Fifo),
            "short-first" => Ok(Admission::ShortFirst),
            _ => Err(crate::error::UnknownValue {
                what: "admission policy",
                value: s.into(),
                expected: "fifo, short-first",
            }),
        }
    }
}

/// One generation request in token ids.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Token ids that end generation (EOS is always one).
    pub stop_tokens: Vec<u32>,
    /// Return this many top alternatives with each token's logprob (`Some(0)`: the token's own only).
    pub logprobs: Option<usize>,
    /// Teacher forcing: emit exactly these tokens (with their logprobs) instead of sampling.
    pub forced: Vec<u32>,
    /// OpenAI `logit_bias`: added to these ids' logits before sampling, and seen by logprobs.
    pub logit_bias: Vec<(u32, f32)>,
    /// `"draft": false`: plain decode for this request even where the host drafts.
    pub no_draft: bool,
    /// Generation goes on past EOS (vLLM's `ignore_eos`); `stop_tokens` still end it.
    pub ignore_eos: bool,
}

/// One generated token.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenEvent {
    pub id: u32,
    pub logprob: Option<f32>,
    pub top: Vec<(u32, f32)>,
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    Stop,
    Length,
}

/// What a request's receiver gets, in order: tokens, then `Done` or `Error`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Token(TokenEvent),
    Done { finish: Finish, prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize },
    Error(String),
}

/// Why a request was not queued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the request queue is full; retry later")]
    QueueFull,
    #[error("prompt of {prompt} tokens does not fit the context of {max} tokens")]
    TooLong { prompt: usize, max: usize },
    #[error("the prompt is empty")]
    Empty,
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    BadToken { id: u32, vocab: usize },
    #[error("the lane host has stopped")]
    Stopped,
}

struct Job {
    req: GenRequest,
    events: Sender<Event>,
    submitted: Instant,
    cancel: Arc<AtomicU8>,
    cached: Arc<AtomicUsize>,
    drafts: Arc<spec::DraftCounts>,
}

const LIVE: u8 = 0;
const DROPPED: u8 = 1;
const STOPPED: u8 = 2;

impl Job {
    /// How the client ended the request early, if it did.
    fn cancelled(&self) -> Option<Outcome> {
        match self.cancel.load(Ordering::Relaxed) {
            LIVE => None,
            STOPPED => Some(Outcome::Stop),
            _ => Some(Outcome::Abort),
        }
    }
}

/// A request's event receiver; dropping it cancels the request, even while it is queued or in its prompt.
#[derive(Debug)]
pub struct Events {
    rx: Receiver<Event>,
    cancel: Arc<AtomicU8>,
    cached: Arc<AtomicUsize>,
    drafts: Arc<spec::DraftCounts>,
}

impl Events {
    /// Ends the request because the client found its stop (a stop string): counted as `stop`, not as an abort.
    pub fn stop_here(self) {
        self.cancel.store(STOPPED, Ordering::Relaxed);
    }

    /// Prompt tokens this request took from the prompt cache (known once it has a lane).
    pub fn cached_tokens(&self) -> usize {
        self.cached.load(Ordering::Relaxed)
    }

    /// Draft tokens this request's windows proposed and accepted so far.
    pub fn draft_counts(&self) -> (usize, usize) {
        (self.drafts.drafted.load(Ordering::Relaxed), self.drafts.accepted.load(Ordering::Relaxed))
    }

    /// A handle that cancels this request from elsewhere (a plain HTTP request whose client hung up).
    pub fn canceller(&self) -> Canceller {
        Canceller(self.cancel.clone())
    }
}

/// Cancels one request as dropping its `Events` would; the lane is freed at its next step.
#[derive(Clone, Debug)]
pub struct Canceller(Arc<AtomicU8>);

impl Canceller {
    /// Counts as an abort unless the request already ended or stopped on its own.
    pub fn cancel(&self) {
        let _ = self.0.compare_exchange(LIVE, DROPPED, Ordering::Relaxed, Ordering::Relaxed);
    }
}

impl std::ops::Deref for Events {
    type Target = Receiver<Event>;
    fn deref(&self) -> &Receiver<Event> {
        &self.rx
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.cancel.compare_exchange(LIVE, DROPPED, Ordering::Relaxed, Ordering::Relaxed);
    }
}

impl IntoIterator for Events {
    type Item = Event;
    type IntoIter = EventIter;
    fn into_iter(self) -> EventIter {
        EventIter(self)
    }
}

/// Blocking iterator over a request's events, ending after `Done` or `Error`.
pub struct EventIter(Events);

impl Iterator for EventIter {
    type Item = Event;
    fn next(&mut self) -> Option<Event> {
        self.0.rx.recv().ok()
    }
}

/// Handle to the scheduler thread; dropping it stops the thread once running work is done.
pub struct LaneHost {
    tx: Option<Sender<Job>>,
    metrics: Arc<Metrics>,
    queued_tokens: Arc<AtomicUsize>,
    limits: Limits,
    max_context: usize,
    vocab: usize,
    thread: Option<JoinHandle<()>>,
}

impl LaneHost {
    /// Starts the scheduler thread, which takes ownership of the model.
    pub fn spawn<F: Family>(family: F, limits: Limits) -> LaneHost {
        let (tx, rx) = mpsc::channel();
        let metrics = Arc::new(Metrics::default());
        let queued_tokens = Arc::new(AtomicUsize::new(0));
        let (max_context, vocab) = (family.max_context(), family.vocab_size());
        let sched = sched::Scheduler::new(family, limits, metrics.clone(), queued_tokens.clone());
        let thread =
            std::thread::Builder::new().name("lane-host".into()).spawn(move || sched.run(rx)).expect("spawn lane host");
        LaneHost { tx: Some(tx), metrics, queued_tokens, limits, max_context, vocab, thread: Some(thread) }
    }

    /// Queues a request; its events arrive on the returned receiver. Dropping the receiver cancels it.
    pub fn submit(&self, req: GenRequest) -> Result<Events, SubmitError> {
        if req.prompt.is_empty() {
            return Err(SubmitError::Empty);
        }
        let biased = req.logit_bias.iter().map(|&(t, _)| t);
        if let Some(id) =
            req.prompt.iter().chain(&req.forced).copied().chain(biased).find(|&t| t as usize >= self.vocab)
        {
            return Err(SubmitError::BadToken { id, vocab: self.vocab });
        }
        let needed = req.prompt.len() + req.forced.len();
        if req.prompt.len() >= self.max_context || needed > self.max_context {
            return Err(SubmitError::TooLong { prompt: needed, max: self.max_context });
        }
        let waiting = &self.metrics.waiting;
        if waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| (w < self.limits.max_queue).then_some(w + 1))
            .is_err()
        {
            return Err(SubmitError::QueueFull);
        }
        let tokens = req.prompt.len();
        let max_tokens = self.limits.max_queued_tokens;
        let claimed = self
            .queued_tokens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| (q + tokens <= max_tokens).then_some(q + tokens));
        if claimed.is_err() {
            waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::QueueFull);
        }
        let (events, rx) = mpsc::channel();
        let (cancel, cached) = (Arc::new(AtomicU8::new(LIVE)), Arc::new(AtomicUsize::new(0)));
        let drafts = Arc::new(spec::DraftCounts::default());
        let job = Job {
            req,
            events,
            submitted: Instant::now(),
            cancel: cancel.clone(),
            cached: cached.clone(),
            drafts: drafts.clone(),
        };
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(job).is_ok());
        if !sent {
            waiting.fetch_sub(1, Ordering::SeqCst);
            self.queued_tokens.fetch_sub(tokens, Ordering::SeqCst);
            return Err(SubmitError::Stopped);
        }
        Ok(Events { rx, cancel, cached, drafts })
    }

    /// The longest prompt plus completion a lane holds, in tokens.
    pub fn max_context(&self) -> usize {
        self.max_context
    }

    /// (running, waiting) requests right now.
    pub fn load(&self) -> (usize, usize) {
        (self.metrics.running.load(Ordering::SeqCst), self.metrics.waiting.load(Ordering::SeqCst))
    }

    /// Counters and histograms for `/metrics`.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

impl Drop for LaneHost {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
