//! The lane host: one scheduler thread owns the model; each running request holds a lane (its caches).

mod family;
mod sample;

pub use family::{Family, load_dsv41};
pub use sample::{Rng, SamplingParams, argmax, log_softmax, sample, top_logprobs};

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

/// Capacity of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Sequences running at once.
    pub max_lanes: usize,
    /// Requests waiting for a lane before new ones are refused.
    pub max_queue: usize,
    /// Prompt rows per prefill step, so decode rounds of other lanes are not starved by a long prompt.
    pub prefill_chunk: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_lanes: 8, max_queue: 64, prefill_chunk: 256 }
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
    Done { finish: Finish, prompt_tokens: usize, completion_tokens: usize },
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
    #[error("the lane host has stopped")]
    Stopped,
}

struct Job {
    req: GenRequest,
    events: Sender<Event>,
}

/// Handle to the scheduler thread; dropping it stops the thread once running work is done.
pub struct LaneHost {
    tx: Option<Sender<Job>>,
    waiting: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
    limits: Limits,
    max_context: usize,
    thread: Option<JoinHandle<()>>,
}

impl LaneHost {
    /// Starts the scheduler thread, which takes ownership of the model.
    pub fn spawn<F: Family>(family: F, limits: Limits) -> LaneHost {
        let (tx, rx) = mpsc::channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let running = Arc::new(AtomicUsize::new(0));
        let max_context = family.max_context();
        let sched = Scheduler {
            family,
            limits,
            queue: VecDeque::new(),
            active: Vec::new(),
            waiting: waiting.clone(),
            running: running.clone(),
        };
        let thread =
            std::thread::Builder::new().name("lane-host".into()).spawn(move || sched.run(rx)).expect("spawn lane host");
        LaneHost { tx: Some(tx), waiting, running, limits, max_context, thread: Some(thread) }
    }

    /// Queues a request; its events arrive on the returned receiver. Dropping the receiver cancels it.
    pub fn submit(&self, req: GenRequest) -> Result<Receiver<Event>, SubmitError> {
        if req.prompt.is_empty() {
            return Err(SubmitError::Empty);
        }
        if req.prompt.len() >= self.max_context {
            return Err(SubmitError::TooLong { prompt: req.prompt.len(), max: self.max_context });
        }
        let claimed = self
            .waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| (w < self.limits.max_queue).then_some(w + 1));
        if claimed.is_err() {
            return Err(SubmitError::QueueFull);
        }
        let (events, rx) = mpsc::channel();
        let sent = self.tx.as_ref().map(|tx| tx.send(Job { req, events }));
        if !matches!(sent, Some(Ok(()))) {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::Stopped);
        }
        Ok(rx)
    }

    /// (running, waiting) requests right now.
    pub fn load(&self) -> (usize, usize) {
        (self.running.load(Ordering::SeqCst), self.waiting.load(Ordering::SeqCst))
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

struct Active<L> {
    lane: L,
    job: Job,
    fed: usize,
    next: Option<u32>,
    generated: usize,
    rng: Rng,
}

struct Scheduler<F: Family> {
    family: F,
    limits: Limits,
    queue: VecDeque<Job>,
    active: Vec<Active<F::Lane>>,
    waiting: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
}

/// What a lane does after a step.
enum After {
    Continue,
    Remove,
}

impl<F: Family> Scheduler<F> {
    fn run(mut self, rx: Receiver<Job>) {
        loop {
            let idle = self.queue.is_empty() && self.active.is_empty();
            let job = if idle { rx.recv().ok() } else { rx.try_recv().ok() };
            match job {
                Some(j) => {
                    self.queue.push_back(j);
                    continue;
                }
                None if idle => return,
                None => {}
            }
            self.admit();
            self.step();
            self.running.store(self.active.len(), Ordering::SeqCst);
        }
    }

    fn admit(&mut self) {
        while self.active.len() < self.limits.max_lanes {
            let Some(job) = self.queue.pop_front() else { break };
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            let rng = Rng::new(job.req.sampling.seed);
            self.active.push(Active { lane: self.family.new_lane(), job, fed: 0, next: None, generated: 0, rng });
        }
    }

    /// One prompt chunk of the oldest lane still in its prompt, or else one decode round over every lane.
    fn step(&mut self) {
        let prefilling = self.active.iter().position(|a| a.fed < a.job.req.prompt.len());
        let lanes: Vec<usize> = match prefilling {
            Some(i) => vec![i],
            None => (0..self.active.len()).collect(),
        };
        let mut remove = Vec::new();
        for i in lanes {
            let out = catch_unwind(AssertUnwindSafe(|| self.step_lane(i)));
            let after = out.unwrap_or_else(|_| {
                let _ = self.active[i].job.events.send(Event::Error("internal error in the model step".into()));
                After::Remove
            });
            if matches!(after, After::Remove) {
                remove.push(i);
            }
        }
        for i in remove.into_iter().rev() {
            self.active.remove(i);
        }
    }

    fn step_lane(&mut self, i: usize) -> After {
        let (family, chunk) = (&self.family, self.limits.prefill_chunk.max(1));
        let a = &mut self.active[i];
        let prompt_len = a.job.req.prompt.len();
        let logits = if a.fed < prompt_len {
            let end = (a.fed + chunk).min(prompt_len);
            let r = family.prefill(&mut a.lane, &a.job.req.prompt[a.fed..end], end == prompt_len);
            a.fed = end;
            match r {
                Ok(Some(l)) => l,
                Ok(None) => return After::Continue,
                Err(e) => return fail(a, e),
            }
        } else {
            let next = a.next.expect("a lane past its prompt has a next token");
            match family.decode(&mut a.lane, &[next]) {
                Ok(mut rows) => rows.remove(0),
                Err(e) => return fail(a, e),
            }
        };
        emit(a, &logits, family.eos_token(), family.max_context())
    }
}

fn fail<L>(a: &mut Active<L>, e: String) -> After {
    let _ = a.job.events.send(Event::Error(e));
    After::Remove
}

/// Samples and sends one token; ends the request on a stop token, the length limit, or a gone receiver.
fn emit<L>(a: &mut Active<L>, logits: &[f32], eos: u32, max_context: usize) -> After {
    let req = &a.job.req;
    let id = sample(logits, &req.sampling, &mut a.rng);
    let done = |finish| Event::Done { finish, prompt_tokens: req.prompt.len(), completion_tokens: a.generated };
    if id == eos || req.stop_tokens.contains(&id) {
        let _ = a.job.events.send(done(Finish::Stop));
        return After::Remove;
    }
    let (logprob, top) = match req.logprobs {
        Some(n) => {
            let lp = log_softmax(logits);
            (Some(lp[id as usize]), top_logprobs(&lp, n))
        }
        None => (None, Vec::new()),
    };
    a.generated += 1;
    if a.job.events.send(Event::Token(TokenEvent { id, logprob, top })).is_err() {
        return After::Remove;
    }
    let room = max_context.saturating_sub(req.prompt.len());
    if a.generated >= req.max_tokens.min(room) {
        let finished =
            Event::Done { finish: Finish::Length, prompt_tokens: req.prompt.len(), completion_tokens: a.generated };
        let _ = a.job.events.send(finished);
        return After::Remove;
    }
    a.next = Some(id);
    After::Continue
}
