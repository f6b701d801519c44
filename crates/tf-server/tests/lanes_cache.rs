//! Gates on the lane host: a resumed prompt equals a fresh one, teacher forcing equals greedy, and admission limits.

mod common;

use common::family::{Log, Scripted};
use common::tiny;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tf_server::lanes::{Admission, Event, Events, GenRequest, LaneHost, Limits, Outcome, SamplingParams};
use tf_server::lanes::{SubmitError, TokenEvent};

fn host(limits: Limits, replay: bool) -> LaneHost {
    let opts = tf_dsv41::Options { replay, ..tf_dsv41::Options::default() };
    LaneHost::spawn(tf_server::lanes::load_dsv41(tiny(), opts).unwrap(), limits)
}

fn collect(rx: Events) -> Vec<Event> {
    rx.into_iter().collect()
}

fn tokens(events: &[Event]) -> Vec<TokenEvent> {
    events.iter().filter_map(|e| if let Event::Token(t) = e { Some(t.clone()) } else { None }).collect()
}

fn prompt(len: u32, salt: u32) -> Vec<u32> {
    (0..len).map(|k| 4 + (k * 53 + salt * 17) % 470).collect()
}

fn sampled(prompt: Vec<u32>, seed: u64) -> GenRequest {
    let sampling = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, seed };
    GenRequest { prompt, max_tokens: 6, sampling, logprobs: Some(4), ..GenRequest::default() }
}

fn cached_of(events: &[Event]) -> usize {
    match events.last() {
        Some(Event::Done { cached_tokens, .. }) => *cached_tokens,
        other => panic!("no Done event: {other:?}"),
    }
}

#[test]
fn a_resumed_prompt_equals_a_fresh_one() {
    for replay in [true, false] {
        let cached = host(Limits { prefill_chunk: 48, prefix_block: 32, ..Limits::default() }, replay);
        let fresh = host(Limits { prefill_chunk: 48, prefix_cache_tokens: 0, ..Limits::default() }, replay);
        let first = prompt(150, 1);
        let warm = collect(cached.submit(sampled(first.clone(), 5)).unwrap());
        assert_eq!(cached_of(&warm), 0);
        let mut resumed = first.clone();
        resumed.extend(prompt(41, 2));
        let hit = collect(cached.submit(sampled(resumed.clone(), 9)).unwrap());
        let cold = collect(fresh.submit(sampled(resumed, 9)).unwrap());
        assert_eq!(cached_of(&hit), 128, "the longest block-aligned prefix (4 × 32) was reused, replay {replay}");
        assert_eq!(cached_of(&cold), 0);
        assert_eq!(tokens(&hit), tokens(&cold), "tokens and logprobs equal bit for bit, replay {replay}");
        let again = collect(cached.submit(sampled(first.clone(), 5)).unwrap());
        assert_eq!(cached_of(&again), 128);
        assert_eq!(tokens(&again), tokens(&warm), "the same prompt again equals its first run, replay {replay}");
        assert_eq!(cached.metrics().cache_hit_tokens(), 256);
    }
}

#[test]
fn forced_tokens_score_like_greedy_generation() {
    let h = host(Limits::default(), true);
    let greedy = GenRequest { prompt: prompt(70, 3), max_tokens: 10, logprobs: Some(5), ..GenRequest::default() };
    let generated = tokens(&collect(h.submit(greedy.clone()).unwrap()));
    assert!(!generated.is_empty());
    let forced = GenRequest { forced: generated.iter().map(|t| t.id).collect(), max_tokens: 1, ..greedy };
    let scored = tokens(&collect(h.submit(forced).unwrap()));
    assert_eq!(scored, generated, "teacher-forced logprobs equal the greedy run's bit for bit");
    let mut off_path =
        GenRequest { prompt: prompt(70, 3), forced: vec![7, 8, 9], logprobs: Some(0), ..GenRequest::default() };
    let events = collect(h.submit(off_path.clone()).unwrap());
    assert_eq!(tokens(&events).iter().map(|t| t.id).collect::<Vec<_>>(), vec![7, 8, 9]);
    assert!(tokens(&events).iter().all(|t| t.logprob.is_some_and(|l| l <= 0.0)));
    off_path.forced = vec![100_000];
    assert!(matches!(h.submit(off_path).unwrap_err(), SubmitError::BadToken { id: 100_000, .. }));
}

fn recorder(limits: Limits) -> (LaneHost, Arc<Mutex<()>>, Log) {
    let family = Scripted::default();
    let (gate, log) = (family.gate.clone(), family.log.clone());
    (LaneHost::spawn(family, limits), gate, log)
}

/// Requests in the order their prompts started.
fn started(log: &Log) -> Vec<u32> {
    let mut out = Vec::new();
    for &(kind, first) in log.lock().unwrap().iter() {
        if kind == 'p' && !out.contains(&first) {
            out.push(first);
        }
    }
    out
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(30), "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn req(first: u32, len: usize, max_tokens: usize) -> GenRequest {
    GenRequest { prompt: vec![first; len], max_tokens, ..GenRequest::default() }
}

/// With the gate held: a one-token blocker that holds a lane, so later submissions queue together.
fn blocker(h: &LaneHost) -> Events {
    let blocker = h.submit(req(1, 5, 1)).unwrap();
    wait_until("the blocker holds a lane", || h.load().1 == 0);
    blocker
}

#[test]
fn short_first_admits_the_shortest_waiting_prompt() {
    for (admission, want) in [(Admission::Fifo, vec![1, 2, 3, 4]), (Admission::ShortFirst, vec![1, 4, 3, 2])] {
        let (h, gate, log) = recorder(Limits { max_lanes: 1, admission, ..Limits::default() });
        let held = gate.lock().unwrap();
        let blocker = blocker(&h);
        let rest: Vec<Events> = [(2, 30), (3, 20), (4, 10)].map(|(f, len)| h.submit(req(f, len, 2)).unwrap()).into();
        drop(held);
        collect(blocker);
        rest.into_iter().for_each(|r| drop(collect(r)));
        assert_eq!(started(&log), want, "{admission:?}");
    }
}

#[test]
fn token_limits_hold_admission_and_refuse_queueing() {
    let limits = Limits { max_lanes: 4, max_active_tokens: 20, max_queued_tokens: 24, ..Limits::default() };
    let (h, gate, log) = recorder(limits);
    let held = gate.lock().unwrap();
    let blocker = blocker(&h);
    let three = [h.submit(req(2, 4, 5)).unwrap(), h.submit(req(3, 4, 5)).unwrap(), h.submit(req(4, 4, 5)).unwrap()];
    assert_eq!(h.submit(req(5, 13, 1)).unwrap_err(), SubmitError::QueueFull, "12 + 13 queued tokens is over 24");
    drop(held);
    collect(blocker);
    for rx in three {
        assert!(matches!(collect(rx).last(), Some(Event::Done { .. })));
    }
    let log = log.lock().unwrap().clone();
    let first_of_4 = log.iter().position(|&e| e == ('p', 4)).unwrap();
    let last_of_2 = log.iter().rposition(|&e| e == ('d', 2)).unwrap();
    assert!(last_of_2 < first_of_4, "two lanes of 4 + 5 tokens fill 20, so the third starts after one ends: {log:?}");
}

#[test]
fn cancelling_while_queued_or_in_the_prompt_frees_everything() {
    let (h, gate, log) = recorder(Limits { max_lanes: 1, prefill_chunk: 2, ..Limits::default() });
    let held = gate.lock().unwrap();
    let running = h.submit(req(1, 40, 4)).unwrap();
    wait_until("admitted", || h.load().1 == 0);
    let queued = h.submit(req(2, 4, 4)).unwrap();
    drop(queued);
    drop(running);
    drop(held);
    let after = collect(h.submit(req(3, 4, 2)).unwrap());
    assert!(matches!(after.last(), Some(Event::Done { .. })));
    assert_eq!(started(&log), vec![1, 3], "the cancelled queued request never ran");
    assert_eq!(log.lock().unwrap().iter().filter(|e| e.1 == 1).count(), 1, "one chunk, then the cancel was seen");
    wait_until("both cancellations counted", || h.metrics().outcome_count(Outcome::Abort) == 2);
    let text = h.metrics().render();
    assert!(text.contains("tf:request_success_total{finished_reason=\"abort\"} 2"), "{text}");
    assert!(text.contains("tf:prompt_tokens_total 44"), "two admitted prompts of 40 and 4: {text}");
    wait_until("the gauges settle at zero", || h.load() == (0, 0));
}

#[test]
fn a_client_side_stop_counts_as_stop_not_abort() {
    let (h, gate, _) = recorder(Limits::default());
    let held = gate.lock().unwrap();
    let rx = h.submit(req(1, 4, 50)).unwrap();
    wait_until("admitted", || h.load().1 == 0);
    rx.stop_here();
    drop(held);
    wait_until("the lane is released", || h.metrics().outcome_count(Outcome::Stop) == 1);
    assert_eq!(h.metrics().outcome_count(Outcome::Abort), 0);
}
