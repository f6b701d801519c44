//! The scheduler thread: admission, prompt chunks and decode rounds, the prompt cache, and per-request events.

use super::sample::{Rng, biased, log_softmax, sample, top_logprobs};
use super::spec::{Costs, LaneDraft, MAX_DRAFT};
use super::{Admission, Event, Family, Finish, Job, Limits, Metrics, Outcome, PrefixCache, TokenEvent};
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Instant;
use tf_family::Draft;

struct Active<L, P> {
    lane: L,
    /// The prompt's rows in flight since admission (Engram read-ahead), one chunk per prefill step.
    prefetch: Option<P>,
    /// The next decode row's rows, fetched from when its token was sampled.
    decode_pf: Option<P>,
    job: Job,
    fed: usize,
    cached: usize,
    /// Prompt length at which this lane's state goes into the prompt cache.
    snapshot_at: Option<usize>,
    next: Option<u32>,
    generated: usize,
    rng: Rng,
    last_token: Instant,
    draft: LaneDraft,
}

impl<L, P> Active<L, P> {
    fn budget(&self) -> usize {
        self.job.req.prompt.len() + self.job.req.max_tokens.max(self.job.req.forced.len())
    }
}

/// A queued job's read-ahead, started before it has a lane (`None`: tried, nothing to fetch); the job's cancel flag (held, so its address stays unique) names it.
struct Early<P> {
    job: Arc<std::sync::atomic::AtomicU8>,
    cached: usize,
    lens: Vec<usize>,
    prefetch: Option<P>,
}

pub(super) struct Scheduler<F: Family> {
    family: F,
    limits: Limits,
    queue: VecDeque<Job>,
    active: Vec<Active<F::Lane, F::Prefetch>>,
    cache: PrefixCache<F::Lane>,
    metrics: Arc<Metrics>,
    queued_tokens: Arc<AtomicUsize>,
    /// The next queued job's read-ahead (one at a time, so memory stays bounded).
    early: Option<Early<F::Prefetch>>,
    /// Alternates prompt chunks with decode rounds while both kinds of lanes exist.
    decode_turn: bool,
    /// Verify-window and draft costs, measured when a lane first drafts (`Some(None)`: this family drafts nothing).
    costs: Option<Option<Costs>>,
    /// Plain steps a new lane waits before drafting: where the last lane's back-off stood.
    draft_hint: u32,
}

/// What a lane does after a step.
enum After {
    Continue,
    /// The lane goes, and its last event (if any) is sent once the running gauge no longer counts it.
    Remove(Outcome, Option<Event>),
}

impl<F: Family> Scheduler<F> {
    pub(super) fn new(family: F, limits: Limits, metrics: Arc<Metrics>, queued_tokens: Arc<AtomicUsize>) -> Self {
        let cache = PrefixCache::new(limits.prefix_block, limits.prefix_cache_tokens);
        Scheduler {
            family,
            limits,
            queue: VecDeque::new(),
            active: Vec::new(),
            cache,
            metrics,
            queued_tokens,
            early: None,
            decode_turn: false,
            costs: None,
            draft_hint: 0,
        }
    }

    pub(super) fn run(mut self, rx: Receiver<Job>) {
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
            self.metrics.running.store(self.active.len(), Ordering::SeqCst);
        }
    }

    /// Index of the queued job to admit next under the admission policy.
    fn pick(&self) -> Option<usize> {
        match self.limits.admission {
            _ if self.queue.is_empty() => None,
            Admission::Fifo => Some(0),
            Admission::ShortFirst => {
                self.queue.iter().enumerate().min_by_key(|(i, j)| (j.req.prompt.len(), *i)).map(|(i, _)| i)
            }
        }
    }

    fn admit(&mut self) {
        while self.active.len() < self.limits.max_lanes {
            let Some(i) = self.pick() else { break };
            let need =
                self.queue[i].req.prompt.len() + self.queue[i].req.max_tokens.max(self.queue[i].req.forced.len());
            let held: usize = self.active.iter().map(Active::budget).sum();
            if !self.active.is_empty() && held + need > self.limits.max_active_tokens {
                break;
            }
            let job = self.queue.remove(i).expect("picked from the queue");
            self.metrics.waiting.fetch_sub(1, Ordering::SeqCst);
            self.queued_tokens.fetch_sub(job.req.prompt.len(), Ordering::SeqCst);
            if let Some(outcome) = job.cancelled() {
                self.metrics.finished(outcome, job.submitted.elapsed().as_secs_f64());
                continue;
            }
            let prompt = &job.req.prompt;
            let made = match self.cache.lookup(prompt) {
                Some((n, lane)) => self.family.fork(lane).map(|l| (n, l)),
                None => self.family.new_lane().map(|l| (0, l)),
            };
            let (cached, lane) = match made {
                Ok(made) => made,
                Err(e) => {
                    let _ = job.events.send(Event::Error(format!("cannot start a lane: {e}")));
                    self.metrics.finished(Outcome::Error, job.submitted.elapsed().as_secs_f64());
                    continue;
                }
            };
            self.metrics.prompt_admitted(prompt.len(), cached);
            job.cached.store(cached, Ordering::Relaxed);
            let snapshot_at = self.cache.snapshot_point(prompt.len()).filter(|&s| s > cached);
            // The read-ahead starts now, at admission, so the first chunk's rows are in flight before its step.
            let chunks = chunk_lens(cached, prompt.len(), self.limits.prefill_chunk.max(1), snapshot_at);
            // A read-ahead started while the job was queued serves it if the prompt cache still cuts it the same way.
            let early = self.early.take_if(|e| Arc::ptr_eq(&e.job, &job.cancel));
            let prefetch = match early.filter(|e| e.cached == cached && e.lens == chunks).and_then(|e| e.prefetch) {
                Some(p) => Ok(Some(p)),
                None if chunks.is_empty() => Ok(None),
                None => self.family.prefetch(Some(&lane), &prompt[cached..], &chunks),
            };
            let prefetch = match prefetch {
                Ok(p) => p,
                Err(e) => {
                    let _ = job.events.send(Event::Error(format!("cannot start the prompt's read-ahead: {e}")));
                    self.metrics.finished(Outcome::Error, job.submitted.elapsed().as_secs_f64());
                    continue;
                }
            };
            let rng = Rng::new(job.req.sampling.seed);
            let draft = LaneDraft::new(
                self.limits.draft && self.family.drafts() && !job.req.no_draft && job.req.forced.is_empty(),
            )
            .learned(self.draft_hint);
            let now = Instant::now();
            let a = Active {
                lane,
                prefetch,
                decode_pf: None,
                job,
                fed: cached,
                cached,
                snapshot_at,
                next: None,
                generated: 0,
                rng,
                last_token: now,
                draft,
            };
            self.active.push(a);
        }
        self.start_early();
    }

    /// Starts the read-ahead of the job admitted next while it waits, so its first chunk's rows are in before its lane.
    fn start_early(&mut self) {
        let Some(i) = self.pick() else {
            self.early = None;
            return;
        };
        let job = &self.queue[i];
        if job.cancelled().is_some() {
            // A cancelled job waits in the queue until admission drops it; its reads and buffers go now.
            self.early = None;
            return;
        }
        if self.early.as_ref().is_some_and(|e| Arc::ptr_eq(&e.job, &job.cancel)) {
            return;
        }
        // A job no longer next gives its read-ahead up: one queued read-ahead at a time.
        self.early = None;
        let prompt = &job.req.prompt;
        let snapshot = self.cache.snapshot_point(prompt.len());
        let (cached, lane) = self.cache.lookup(prompt).map_or((0, None), |(n, l)| (n, Some(l)));
        let lens = chunk_lens(cached, prompt.len(), self.limits.prefill_chunk.max(1), snapshot.filter(|&s| s > cached));
        // Tried once per job (hashing a long prompt every step would cost); one that cannot start is tried again at admission, where its error fails the request.
        let prefetch =
            if lens.is_empty() { None } else { self.family.prefetch(lane, &prompt[cached..], &lens).ok().flatten() };
        self.early = Some(Early { job: job.cancel.clone(), cached, lens, prefetch });
    }

    /// One prompt chunk of the oldest lane still in its prompt, or one decode round over the lanes past theirs.
    fn step(&mut self) {
        let prefilling = self.active.iter().position(|a| a.fed < a.job.req.prompt.len());
        let decoding: Vec<usize> = (0..self.active.len()).filter(|&i| self.active[i].next.is_some()).collect();
        let lanes = match prefilling {
            Some(i) if decoding.is_empty() || !self.decode_turn => vec![i],
            _ => decoding,
        };
        self.decode_turn = !self.decode_turn;
        let panicked = || After::Remove(Outcome::Error, Some(Event::Error("internal error in the model step".into())));
        let (mut afters, mut wants) = (Vec::new(), Vec::new());
        for i in lanes {
            if let Some(outcome) = self.active[i].job.cancelled() {
                afters.push((i, After::Remove(outcome, None)));
                continue;
            }
            match catch_unwind(AssertUnwindSafe(|| self.step_lane(i))) {
                Ok(Ok(None)) => {}
                Ok(Ok(Some(draft))) => wants.push((i, draft)),
                Ok(Err(after)) => afters.push((i, after)),
                Err(_) => afters.push((i, panicked())),
            }
        }
        // A panic while drafting fails the lanes that asked for drafts; the others decode plainly.
        let planned = catch_unwind(AssertUnwindSafe(|| self.plan_drafts(&wants))).unwrap_or_else(|_| {
            wants.iter().map(|&(i, draft)| (i, if draft { Err(panicked()) } else { Ok(Row::Plain) })).collect()
        });
        let mut rows = Vec::with_capacity(planned.len());
        for (i, r) in planned {
            match r {
                Ok(row) => rows.push((i, row)),
                Err(after) => afters.push((i, after)),
            }
        }
        // A family that batches runs every decoding lane in one step (a panic there fails that step's lanes); others one lane a step.
        let per = if self.family.batches() { self.limits.max_step_lanes.max(1) } else { 1 };
        for group in rows.chunks(per) {
            let round = catch_unwind(AssertUnwindSafe(|| self.decode_round(group)));
            afters.extend(round.unwrap_or_else(|_| group.iter().map(|(i, _)| (*i, panicked())).collect()));
        }
        afters.sort_by_key(|(i, _)| *i);
        let mut remove = Vec::new();
        for (i, after) in afters {
            if let After::Remove(outcome, last) = after {
                self.metrics.finished(outcome, self.active[i].job.submitted.elapsed().as_secs_f64());
                remove.push((i, last));
            }
        }
        let mut ended = Vec::new();
        for (i, last) in remove.into_iter().rev() {
            let a = self.active.remove(i);
            ended.extend(last.map(|e| (a.job.events, e)));
        }
        self.metrics.running.store(self.active.len(), Ordering::SeqCst);
        for (events, e) in ended {
            let _ = events.send(e);
        }
    }

    /// A prompt chunk on lane `i` (`Ok(None)` after it, `Err` when the lane ends), or the row it runs in this round's decode step.
    fn step_lane(&mut self, i: usize) -> Result<Option<bool>, After> {
        let a = &mut self.active[i];
        if a.fed >= a.job.req.prompt.len() {
            return Ok(Some(a.draft.wants()));
        }
        let (family, chunk) = (&self.family, self.limits.prefill_chunk.max(1));
        let a = &mut self.active[i];
        let prompt = &a.job.req.prompt;
        let logits = {
            let end = chunk_end(a.fed, prompt.len(), chunk, a.snapshot_at);
            let (tokens, last) = (&prompt[a.fed..end], end == prompt.len());
            let r = match a.prefetch.as_mut() {
                Some(pf) => family.prefill_prefetched(&mut a.lane, tokens, last, pf),
                None => family.prefill(&mut a.lane, tokens, last),
            };
            a.fed = end;
            if last {
                // The prompt is in: its read-ahead (readers, buffers) goes now rather than with the lane.
                a.prefetch = None;
            }
            if r.is_ok() && a.snapshot_at == Some(end) {
                // A snapshot that cannot be made (device memory) only costs a later cache hit.
                if let Ok(snap) = family.fork(&a.lane) {
                    self.cache.insert(prompt[..end].to_vec(), snap);
                }
            }
            match r {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(None),
                Err(e) => return Err(fail(e.to_string())),
            }
        };
        match emit(a, &logits, family.eos_token(), family.max_context(), &self.metrics) {
            After::Continue => {
                // The token's rows are read while other lanes' steps run, one step ahead of its own.
                a.decode_pf = a.next.and_then(|next| family.prefetch_decode(&a.lane, &[next]));
                Ok(None)
            }
            after => Err(after),
        }
    }

    /// Each lane of `group` (ascending) runs its row, all in one family step: weights are read once for the round.
    fn decode_round(&mut self, group: &[(usize, Row)]) -> Vec<(usize, After)> {
        let (family, metrics) = (&self.family, &self.metrics);
        let mut sel: Vec<&mut Active<F::Lane, F::Prefetch>> = self
            .active
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| group.iter().any(|(g, _)| g == i))
            .map(|(_, a)| a)
            .collect();
        let next = |a: &Active<_, _>| a.next.expect("a lane past its prompt has a next token");
        let tokens: Vec<Vec<u32>> = sel
            .iter()
            .zip(group)
            .map(|(a, (_, row))| match row {
                Row::Plain => vec![next(a)],
                Row::Window(w) => w.clone(),
            })
            .collect();
        let verify: Vec<bool> = group.iter().map(|(_, r)| matches!(r, Row::Window(_))).collect();
        // A window's rows were never fetched ahead (its read-ahead was for one row).
        let mut pfs: Vec<Option<F::Prefetch>> =
            sel.iter_mut().zip(&verify).map(|(a, &v)| a.decode_pf.take().filter(|_| !v)).collect();
        let results = {
            let mut lanes: Vec<&mut F::Lane> = sel.iter_mut().map(|a| &mut a.lane).collect();
            let rows: Vec<&[u32]> = tokens.iter().map(Vec::as_slice).collect();
            family.step_lanes(&mut lanes, &rows, &verify, &mut pfs)
        };
        // A lane without its result would keep a moved state and no token: fail the whole step instead.
        assert_eq!(results.len(), sel.len(), "the family answered every lane of the step");
        metrics.decode_round(sel.len());
        let each = sel.into_iter().zip(group).zip(results);
        each.map(|((a, (i, row)), r)| {
            let after = match (r, row) {
                (Err(e), _) => fail(e.to_string()),
                (Ok(rows), Row::Plain) => emit(a, &rows[0], family.eos_token(), family.max_context(), metrics),
                (Ok(rows), Row::Window(w)) => accept(family, metrics, a, w, &rows),
            };
            if let (After::Continue, Some(next)) = (&after, a.next) {
                // The token's rows are read while other lanes' prompt chunks run, one step ahead of its own.
                a.decode_pf = family.prefetch_decode(&a.lane, &[next]);
            }
            (*i, after)
        })
        .collect()
    }
}

/// What a decoding lane runs in a round's step: its next token, or a verify window `[next, d1 .. dk]`.
enum Row {
    Plain,
    Window(Vec<u32>),
}

impl<F: Family> Scheduler<F> {
    /// Each lane's row this round (`wants`: whether it asks for drafts): a verify window where a draft is worth its cost, else plain decode; the lanes draft in one family call.
    fn plan_drafts(&mut self, wants: &[(usize, bool)]) -> Vec<(usize, Result<Row, After>)> {
        let fixed = self.limits.draft_len;
        if fixed.is_none() && self.costs.is_none() && wants.iter().any(|w| w.1) {
            self.costs = Some(Costs::measure(&self.family));
        }
        let known = fixed.is_some() || self.costs.as_ref().is_some_and(Option::is_some);
        let mut ask = Vec::new();
        for &(i, _) in wants.iter().filter(|w| w.1) {
            let a = &mut self.active[i];
            let room = limit(&a.job.req, self.family.max_context()).saturating_sub(a.generated + 1).min(MAX_DRAFT);
            if !known {
                a.draft.on = false;
            } else if room > 0 {
                ask.push((i, a.next.expect("a lane past its prompt has a next token"), room));
            }
        }
        let drafts = {
            let mut lanes: Vec<&mut F::Lane> = (self.active.iter_mut().enumerate())
                .filter(|(i, _)| ask.iter().any(|(j, ..)| j == i))
                .map(|(_, a)| &mut a.lane)
                .collect();
            let (next, room): (Vec<u32>, Vec<usize>) = ask.iter().map(|&(_, n, r)| (n, r)).unzip();
            self.family.draft_lanes(&mut lanes, &next, &room)
        };
        assert_eq!(drafts.len(), ask.len(), "the family answered every lane's draft");
        let mut drafted: Vec<_> = ask.into_iter().zip(drafts).map(|((i, n, _), d)| (i, n, d)).collect();
        let mut out = Vec::with_capacity(wants.len());
        for &(i, _) in wants {
            out.push(match drafted.iter().position(|d| d.0 == i) {
                Some(at) => {
                    let (_, next, d) = drafted.swap_remove(at);
                    (i, self.window_of(i, next, d))
                }
                None => (i, Ok(Row::Plain)),
            });
        }
        out
    }

    /// Lane `i`'s row from its draft: a window of the drafts worth verifying, else plain decode.
    fn window_of(&mut self, i: usize, next: u32, d: Result<Option<Draft>, F::Error>) -> Result<Row, After> {
        let fixed = self.limits.draft_len;
        let costs = if fixed.is_some() { None } else { self.costs.as_ref().and_then(Option::as_ref) };
        let a = &mut self.active[i];
        let d = match d {
            Ok(Some(d)) => d,
            Ok(None) => {
                a.draft.on = false;
                return Ok(Row::Plain);
            }
            Err(e) => return Err(fail(e.to_string())),
        };
        let (k, wins) = match (fixed, costs) {
            (Some(k), _) => (k.min(d.tokens.len()), true),
            (None, c) => c.expect("measured above").choose(&d.confidence),
        };
        if wins {
            a.draft.won()
        } else {
            a.draft.back_off()
        }
        self.draft_hint = a.draft.hint();
        if k == 0 {
            return Ok(Row::Plain);
        }
        Ok(Row::Window(std::iter::once(next).chain(d.tokens[..k].iter().copied()).collect()))
    }
}

/// Emits a verify window's rows while each sample equals the draft before it, then cuts the lane back to them.
fn accept<F: Family>(
    family: &F,
    metrics: &Metrics,
    a: &mut Active<F::Lane, F::Prefetch>,
    window: &[u32],
    rows: &[Vec<f32>],
) -> After {
    let k = window.len() - 1;
    let mut kept = 0;
    // Each row is sampled as plain decode samples it; a draft stays while it equals that sample (the last row always ends the loop).
    for (r, row) in rows.iter().enumerate() {
        kept += 1;
        let after = emit(a, row, family.eos_token(), family.max_context(), metrics);
        if matches!(after, After::Remove(..)) || a.next != window.get(r + 1).copied() {
            metrics.window(k, kept - 1);
            a.job.drafts.add(k, kept - 1);
            if matches!(after, After::Remove(..)) {
                return after;
            }
            break;
        }
    }
    match family.rewind(&mut a.lane, kept) {
        Ok(()) => After::Continue,
        Err(e) => fail(e.to_string()),
    }
}

/// How many tokens a request may generate: its forced tokens, or `max_tokens` within the context.
fn limit(req: &super::GenRequest, max_context: usize) -> usize {
    if req.forced.is_empty() {
        req.max_tokens.min(max_context.saturating_sub(req.prompt.len()))
    } else {
        req.forced.len()
    }
}

/// Where the prompt chunk starting at `fed` ends: `chunk` tokens on, or earlier at the prompt cache's snapshot point.
fn chunk_end(fed: usize, len: usize, chunk: usize, snapshot_at: Option<usize>) -> usize {
    let end = (fed + chunk).min(len);
    snapshot_at.filter(|&s| fed < s && s < end).unwrap_or(end)
}

/// The lengths of the prompt chunks the steps from `fed` will feed.
fn chunk_lens(mut fed: usize, len: usize, chunk: usize, snapshot_at: Option<usize>) -> Vec<usize> {
    let mut lens = Vec::new();
    while fed < len {
        let end = chunk_end(fed, len, chunk, snapshot_at);
        lens.push(end - fed);
        fed = end;
    }
    lens
}

fn fail(e: String) -> After {
    After::Remove(Outcome::Error, Some(Event::Error(e)))
}

/// Picks (or, forced, takes) and sends one token; a forced run ending in a stop token finishes as `Stop`, like its original.
fn emit<L, P>(a: &mut Active<L, P>, logits: &[f32], eos: u32, max_context: usize, metrics: &Metrics) -> After {
    let req = &a.job.req;
    let with_bias;
    let logits = if req.logit_bias.is_empty() {
        logits
    } else {
        with_bias = biased(logits, &req.logit_bias);
        &with_bias[..]
    };
    let forced = !req.forced.is_empty();
    let id = if forced { req.forced[a.generated] } else { sample(logits, &req.sampling, &mut a.rng) };
    let done = |finish, completion_tokens| Event::Done {
        finish,
        prompt_tokens: req.prompt.len(),
        completion_tokens,
        cached_tokens: a.cached,
    };
    if !forced && ((id == eos && !req.ignore_eos) || req.stop_tokens.contains(&id)) {
        return After::Remove(Outcome::Stop, Some(done(Finish::Stop, a.generated)));
    }
    let (logprob, top) = match req.logprobs {
        Some(n) => {
            let lp = log_softmax(logits);
            (Some(lp[id as usize]), top_logprobs(&lp, n))
        }
        None => (None, Vec::new()),
    };
    let now = Instant::now();
    let since = if a.generated == 0 { a.job.submitted } else { a.last_token };
    metrics.token(a.generated == 0, now.duration_since(since).as_secs_f64());
    a.last_token = now;
    a.generated += 1;
    if a.job.events.send(Event::Token(TokenEvent { id, logprob, top })).is_err() {
        return After::Remove(a.job.cancelled().unwrap_or(Outcome::Abort), None);
    }
    if a.generated >= limit(req, max_context) {
        let stopped = forced && (id == eos || req.stop_tokens.contains(&id));
        let (finish, outcome) = if stopped { (Finish::Stop, Outcome::Stop) } else { (Finish::Length, Outcome::Length) };
        return After::Remove(outcome, Some(done(finish, a.generated)));
    }
    a.next = Some(id);
    After::Continue
}
