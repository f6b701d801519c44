//! The lane host: concurrent requests equal their solo runs bit for bit, limits refuse cleanly, failures stay local.

use std::sync::{Arc, Mutex, OnceLock};
use tf_server::lanes::{Event, Events, Family, Finish, GenRequest, LaneHost, Limits, SamplingParams, SubmitError};

fn tiny() -> &'static std::path::Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Tiny, 0, d.path()).unwrap();
        d
    })
    .path()
}

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
    for events in &solo {
        assert!(matches!(events.last(), Some(Event::Done { finish: Finish::Length, completion_tokens: 12, .. })));
        assert!(matches!(&events[0], Event::Token(t) if t.logprob.is_some() && t.top.len() == 3));
    }
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

/// A scripted family: logits favour `(last + 1) % 16`; decoding 13 fails, decoding 14 panics; a gate can hold steps.
struct Script {
    gate: Arc<Mutex<()>>,
}

impl Family for Script {
    type Lane = Vec<u32>;
    fn new_lane(&self) -> Vec<u32> {
        Vec::new()
    }
    fn fork(&self, lane: &Vec<u32>) -> Vec<u32> {
        lane.clone()
    }
    fn vocab_size(&self) -> usize {
        16
    }
    fn eos_token(&self) -> u32 {
        15
    }
    fn max_context(&self) -> usize {
        64
    }
    fn prefill(&self, lane: &mut Vec<u32>, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, String> {
        let _held = self.gate.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lane.extend_from_slice(tokens);
        Ok(last.then(|| next_logits(lane)))
    }
    fn decode(&self, lane: &mut Vec<u32>, tokens: &[u32]) -> Result<Vec<Vec<f32>>, String> {
        let _held = self.gate.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match tokens[0] {
            13 => return Err("token 13 is refused".into()),
            14 => panic!("token 14 breaks the model"),
            _ => {}
        }
        lane.extend_from_slice(tokens);
        Ok(vec![next_logits(lane)])
    }
}

fn next_logits(lane: &[u32]) -> Vec<f32> {
    let mut l = vec![0.0; 16];
    l[((lane[lane.len() - 1] + 1) % 16) as usize] = 5.0;
    l
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> GenRequest {
    GenRequest { prompt, max_tokens, ..GenRequest::default() }
}

#[test]
fn a_full_queue_answers_queue_full() {
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let h = LaneHost::spawn(
        Script { gate: gate.clone() },
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
    let h = LaneHost::spawn(Script { gate: Arc::new(Mutex::new(())) }, Limits::default());
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
    assert_eq!(h.load(), (0, 0));
}
