//! The lane host: concurrent requests equal their solo runs bit for bit, limits refuse cleanly, failures stay local.

mod common;

use common::family::Scripted;
use common::tiny;

use std::sync::{Arc, Mutex};
use tf_server::lanes::{Event, Events, Finish, GenRequest, LaneHost, Limits, SamplingParams, SubmitError};

fn host(limits: Limits) -> LaneHost {
    let model = tf_server::lanes::load_dsv41(tiny(), tf_dsv41::Options::default()).unwrap();
    LaneHost::spawn(model, limits)
}

fn collect(rx: Events) -> Vec<Event> {
    rx.into_iter().collect()
}

fn req(i: u32, temperature: f32) -> GenRequest {
    let prompt = (0..20 + 3 * i).map(|k| 4 + (k * 37 + i * 11) % 470).collect();
    let sampling = SamplingParams { temperature, top_k: 50, top_p: 0.9, seed: 1000 + u64::from(i) };
    GenRequest { prompt, max_tokens: 12, sampling, logprobs: Some(3), ..GenRequest::default() }
}

#[test]
fn eight_concurrent_requests_equal_their_solo_runs() {
    let reqs: Vec<GenRequest> = (0..8).map(|i| req(i, if i % 2 == 0 { 0.0 } else { 0.8 })).collect();
    let solo: Vec<Vec<Event>> = {
        let h = host(Limits::default());
        reqs.iter().map(|r| collect(h.submit(r.clone()).unwrap())).collect()
    };
    let h = host(Limits { max_lanes: 8, max_queue: 8, prefill_chunk: 7, ..Limits::default() });
    let rxs: Vec<_> = reqs.iter().map(|r| h.submit(r.clone()).unwrap()).collect();
    let together: Vec<Vec<Event>> = rxs.into_iter().map(collect).collect();
    assert_eq!(together, solo, "tokens and logprobs are bit-identical alone and batched");
    let (steps, lanes) = h.metrics().decode_rounds();
    assert!(lanes > steps + 8, "decode rounds ran lanes together: {lanes} lanes in {steps} steps");
    assert!(h.metrics().render().contains(&format!("tf:decode_step_lanes_total {lanes}\n")));
    for events in &solo {
        assert!(matches!(events.last(), Some(Event::Done { finish: Finish::Length, completion_tokens: 12, .. })));
        assert!(matches!(&events[0], Event::Token(t) if t.logprob.is_some() && t.top.len() == 3));
    }
}

#[test]
fn max_step_lanes_caps_the_lanes_a_step_runs_and_changes_no_bit() {
    let reqs: Vec<GenRequest> = (0..6).map(|i| req(i, 0.0)).collect();
    let mut replies = Vec::new();
    for per in [1, 3, 64] {
        let h = host(Limits { max_lanes: 6, max_step_lanes: per, prefill_chunk: 64, ..Limits::default() });
        let rxs: Vec<_> = reqs.iter().map(|r| h.submit(r.clone()).unwrap()).collect();
        replies.push(rxs.into_iter().map(collect).collect::<Vec<_>>());
        let (steps, lanes) = h.metrics().decode_rounds();
        assert!(lanes <= steps * per as u64, "at most {per} lanes a step: {lanes} lanes in {steps} steps");
        assert!(per == 1 || lanes > steps, "{per}: lanes shared steps ({lanes} in {steps})");
    }
    assert!(replies.iter().all(|r| *r == replies[0]), "one lane a step, three, or all give the same bits");
}

#[test]
fn a_dropped_receiver_frees_its_lane_and_others_finish() {
    let h = host(Limits { max_lanes: 1, max_queue: 4, prefill_chunk: 64, ..Limits::default() });
    let mut long = req(1, 0.0);
    long.max_tokens = 200;
    let first = h.submit(long).unwrap();
    let second = h.submit(req(2, 0.0)).unwrap();
    assert!(matches!(first.recv().unwrap(), Event::Token(_)));
    drop(first);
    let events = collect(second);
    assert!(matches!(events.last(), Some(Event::Done { .. })), "the queued request got the freed lane");
}

#[test]
fn bad_requests_are_refused_before_queueing() {
    let h = host(Limits::default());
    assert_eq!(h.submit(GenRequest::default()).unwrap_err(), SubmitError::Empty);
    let too_long = GenRequest { prompt: vec![5; 256], max_tokens: 1, ..GenRequest::default() };
    assert_eq!(h.submit(too_long).unwrap_err(), SubmitError::TooLong { prompt: 256, max: 256 });
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> GenRequest {
    GenRequest { prompt, max_tokens, ..GenRequest::default() }
}

#[test]
fn a_full_queue_answers_queue_full() {
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let h = LaneHost::spawn(
        Scripted { gate: gate.clone(), ..Scripted::default() },
        Limits { max_lanes: 1, max_queue: 2, prefill_chunk: 8, ..Limits::default() },
    );
    let a = h.submit(greedy(vec![1], 3)).unwrap();
    while h.load().1 > 0 {
        std::thread::yield_now();
    }
    let b = h.submit(greedy(vec![2], 3)).unwrap();
    let c = h.submit(greedy(vec![3], 3)).unwrap();
    assert_eq!(h.submit(greedy(vec![4], 3)).unwrap_err(), SubmitError::QueueFull);
    drop(held);
    for rx in [a, b, c] {
        assert!(matches!(collect(rx).last(), Some(Event::Done { finish: Finish::Length, .. })));
    }
}

#[test]
fn a_failing_or_panicking_request_fails_alone() {
    let h = LaneHost::spawn(Scripted::default(), Limits::default());
    let fails = h.submit(greedy(vec![11], 5)).unwrap();
    let panics = h.submit(greedy(vec![13], 5)).unwrap();
    let fine = h.submit(greedy(vec![1], 5)).unwrap();
    assert!(matches!(collect(fails).last(), Some(Event::Error(e)) if e.contains("13")));
    assert!(matches!(collect(panics).last(), Some(Event::Error(e)) if e.contains("internal")));
    let ok = collect(fine);
    let ids: Vec<u32> = ok.iter().filter_map(|e| if let Event::Token(t) = e { Some(t.id) } else { None }).collect();
    assert_eq!(ids, vec![2, 3, 4, 5, 6]);
    let eos = collect(h.submit(greedy(vec![14], 5)).unwrap());
    assert!(matches!(eos.as_slice(), [Event::Done { finish: Finish::Stop, completion_tokens: 0, .. }]), "{eos:?}");
    let past = collect(h.submit(GenRequest { ignore_eos: true, ..greedy(vec![14], 3) }).unwrap());
    let ids: Vec<u32> = past.iter().filter_map(|e| if let Event::Token(t) = e { Some(t.id) } else { None }).collect();
    assert_eq!(ids, vec![15, 0, 1], "ignore_eos generates through EOS to max_tokens");
    assert_eq!(h.load(), (0, 0));
}

#[test]
fn a_prompt_is_fetched_ahead_at_admission_in_the_chunks_it_is_fed() {
    let fam = Scripted { prefetch: true, ..Scripted::default() };
    let log = fam.log.clone();
    let h = LaneHost::spawn(fam, Limits { max_lanes: 1, prefill_chunk: 4, ..Limits::default() });
    let events = collect(h.submit(greedy((1..=10).collect(), 2)).unwrap());
    assert!(matches!(events.last(), Some(Event::Done { .. })), "{events:?}");
    let log = log.lock().unwrap().clone();
    let fed: Vec<(char, u32)> = log.iter().copied().filter(|(k, _)| *k == 'f' || *k == 'F').collect();
    assert_eq!(
        fed,
        [('f', 3), ('F', 4), ('F', 4), ('F', 2)],
        "one read-ahead of 3 chunks, then each chunk from it: {log:?}"
    );
}

#[test]
fn the_next_queued_prompt_is_fetched_ahead_while_it_waits_and_fed_from_that_read_ahead() {
    let fam = Scripted { prefetch: true, ..Scripted::default() };
    let (log, gate) = (fam.log.clone(), fam.gate.clone());
    let held = gate.lock().unwrap();
    let h = LaneHost::spawn(fam, Limits { max_lanes: 1, prefill_chunk: 4, ..Limits::default() });
    let a = h.submit(greedy((1..=10).collect(), 2)).unwrap();
    // A holds the only lane (its first chunk waits on the gate) before B arrives.
    while !log.lock().unwrap().contains(&('f', 3)) {
        std::thread::yield_now();
    }
    let b = h.submit(greedy((1..=8).collect(), 2)).unwrap();
    drop(held);
    for events in [collect(a), collect(b)] {
        assert!(matches!(events.last(), Some(Event::Done { .. })), "{events:?}");
    }
    let log = log.lock().unwrap().clone();
    let fed: Vec<(char, u32)> = log.iter().copied().filter(|(k, _)| *k == 'f' || *k == 'F').collect();
    assert_eq!(
        fed,
        [('f', 3), ('F', 4), ('f', 2), ('F', 4), ('F', 2), ('F', 4), ('F', 4)],
        "B's 2 chunks fetched while A ran, then fed from that one read-ahead: {log:?}"
    );
}

#[test]
fn a_queued_prompt_with_nothing_to_fetch_is_asked_once_not_every_step() {
    let fam = Scripted::default();
    let (log, gate) = (fam.log.clone(), fam.gate.clone());
    let held = gate.lock().unwrap();
    let h = LaneHost::spawn(fam, Limits { max_lanes: 1, prefill_chunk: 2, ..Limits::default() });
    let a = h.submit(greedy((1..=10).collect(), 3)).unwrap();
    while !log.lock().unwrap().contains(&('n', 0)) {
        std::thread::yield_now();
    }
    let b = h.submit(greedy((2..=5).collect(), 2)).unwrap();
    drop(held);
    assert!(collect(a).last().is_some_and(|e| matches!(e, Event::Done { .. })));
    assert!(collect(b).last().is_some_and(|e| matches!(e, Event::Done { .. })));
    let asked = log.lock().unwrap().iter().filter(|e| e.0 == 'n').count();
    // A at admission; B once while it waited through A's 8 steps, and again at its admission.
    assert_eq!(asked, 3, "{:?}", log.lock().unwrap());
}

#[test]
fn each_decode_row_is_fetched_from_when_its_token_was_sampled() {
    let fam = Scripted { prefetch: true, ..Scripted::default() };
    let log = fam.log.clone();
    let h = LaneHost::spawn(fam, Limits { max_lanes: 1, prefill_chunk: 4, ..Limits::default() });
    let events = collect(h.submit(greedy((1..=5).collect(), 4)).unwrap());
    assert!(matches!(events.last(), Some(Event::Done { .. })), "{events:?}");
    let log = log.lock().unwrap().clone();
    let fed: Vec<(char, u32)> = log.iter().copied().filter(|(k, _)| *k == 'g' || *k == 'G').collect();
    // Tokens 6..9 are sampled; the first three are decoded, each from its own read-ahead; the last ends the request.
    assert_eq!(fed, [('g', 6), ('G', 6), ('g', 7), ('G', 7), ('g', 8), ('G', 8)], "{log:?}");
}

#[test]
fn a_read_error_mid_prompt_fails_only_that_request() {
    let fam = Scripted { prefetch: true, ..Scripted::default() };
    let h = LaneHost::spawn(fam, Limits { max_lanes: 2, prefill_chunk: 4, ..Limits::default() });
    let prompts: [Vec<u32>; 3] = [(1..=9).collect(), vec![1, 2, 3, 4, 5, 12, 6, 7], (2..=10).collect()];
    let runs: Vec<Events> = prompts.iter().map(|p| h.submit(greedy(p.clone(), 3)).unwrap()).collect();
    let ends: Vec<Option<Event>> = runs.into_iter().map(|r| collect(r).pop()).collect();
    assert!(
        matches!(&ends[1], Some(Event::Error(e)) if e.contains("short read") && e.contains("layers.1.engram.embed")),
        "{ends:?}"
    );
    assert!(matches!(ends[0], Some(Event::Done { .. })) && matches!(ends[2], Some(Event::Done { .. })), "{ends:?}");
    let after = collect(h.submit(greedy((3..=8).collect(), 2)).unwrap());
    assert!(matches!(after.last(), Some(Event::Done { .. })), "the host still serves: {after:?}");
    assert_eq!(h.load(), (0, 0));
}

#[test]
fn engram_rows_read_from_disk_ahead_equal_the_mapped_tables() {
    // Chunks of 6 and prefix-cache snapshots every 8 tokens cut the prompts unevenly; the repeat resumes from the cache.
    let reqs: Vec<GenRequest> = [0, 1, 0].iter().map(|&i| req(i, 0.0)).collect();
    let run = |io| {
        let opts = tf_dsv41::Options { engram_io: io, ..tf_dsv41::Options::default() };
        let limits = Limits { prefill_chunk: 6, prefix_block: 8, ..Limits::default() };
        let h = LaneHost::spawn(tf_server::lanes::load_dsv41(tiny(), opts).unwrap(), limits);
        let mut out: Vec<_> = reqs.iter().map(|r| collect(h.submit(r.clone()).unwrap())).collect();
        // One lane: the later requests wait in the queue, fetched ahead there (the repeat's cut changes once cached).
        let one =
            LaneHost::spawn(tf_server::lanes::load_dsv41(tiny(), opts).unwrap(), Limits { max_lanes: 1, ..limits });
        let queued: Vec<Events> = reqs.iter().map(|r| one.submit(r.clone()).unwrap()).collect();
        out.extend(queued.into_iter().map(collect));
        out
    };
    let mapped = run(None);
    assert!(mapped.iter().all(|e| matches!(e.last(), Some(Event::Done { .. }))), "{mapped:?}");
    assert_eq!(run(Some(tf_dsv41::EngramIo::Mmap)), mapped);
}

#[test]
fn a_request_is_no_longer_counted_running_once_its_last_event_arrives() {
    let fam = Scripted::default();
    let held = fam.gate.lock().unwrap();
    let h = LaneHost::spawn(fam.clone(), Limits { max_lanes: 2, ..Limits::default() });
    // A ends in the decode round where B's lane, after A's, decodes the slow token 11.
    let a = h.submit(greedy(vec![1, 2, 3], 3)).unwrap();
    let b = h.submit(greedy(vec![8, 9, 10], 2)).unwrap();
    drop(held);
    // Read up to Done only, as a server does, not until the host lets go of the channel.
    assert!(a.into_iter().any(|e| matches!(e, Event::Done { .. })));
    assert_eq!(h.load(), (0, 0), "A's Done came before the gauge let go of A and B: {:?}", fam.log.lock().unwrap());
    assert!(collect(b).last().is_some_and(|e| matches!(e, Event::Done { .. })));
}
