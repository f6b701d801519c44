//! DSpark drafting in the lane host (issue 26): drafted replies equal plain ones bit for bit, alone and 8 at a time.

mod common;

use common::tiny;
use std::path::Path;
use tf_server::lanes::{Event, GenRequest, LaneHost, Limits, SamplingParams};

fn host(dir: &Path, limits: Limits) -> LaneHost {
    LaneHost::spawn(tf_server::lanes::load_dsv41(dir, tf_dsv41::Options::default()).unwrap(), limits)
}

fn small_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Small, 0, d.path()).unwrap();
        d
    })
    .path()
}

fn req(i: u32, vocab: u32, temperature: f32) -> GenRequest {
    let prompt = (0..1 + 7 * i).map(|k| 4 + (k * 37 + i * 11) % (vocab - 8)).collect();
    let sampling = SamplingParams { temperature, top_k: 0, top_p: 1.0, seed: 77 + u64::from(i) };
    GenRequest { prompt, max_tokens: 24, sampling, logprobs: Some(2), ..GenRequest::default() }
}

/// Every request's events, submitted `together` at once or one after another.
fn run(h: &LaneHost, reqs: &[GenRequest], together: bool) -> Vec<Vec<Event>> {
    if together {
        let rxs: Vec<_> = reqs.iter().map(|r| h.submit(r.clone()).unwrap()).collect();
        rxs.into_iter().map(|rx| rx.into_iter().collect()).collect()
    } else {
        reqs.iter().map(|r| h.submit(r.clone()).unwrap().into_iter().collect()).collect()
    }
}

/// Drafted runs with `(k, together)` in `modes` against one plain run, request by request.
fn check(dir: &Path, vocab: u32, temperature: f32, modes: &[(usize, bool)]) {
    let reqs: Vec<GenRequest> = (0..8).map(|i| req(i, vocab, temperature)).collect();
    let plain = run(&host(dir, Limits { draft: false, ..Limits::default() }), &reqs, false);
    assert!(plain.iter().all(|e| matches!(e.last(), Some(Event::Done { .. }))), "{plain:?}");
    for &(k, together) in modes {
        let h = host(dir, Limits { draft_len: Some(k), ..Limits::default() });
        // Together, every third request does not draft: plain rows and verify windows share the host's steps.
        let mixed: Vec<GenRequest> = reqs
            .iter()
            .enumerate()
            .map(|(i, r)| GenRequest { no_draft: together && i % 3 == 0, ..r.clone() })
            .collect();
        let drafted = run(&h, &mixed, together);
        let (windows, proposed, accepted) = h.metrics().drafting();
        assert!(windows > 8 && proposed >= windows, "k {k}: {windows} windows, {proposed} drafts");
        let (steps, lanes) = h.metrics().decode_rounds();
        assert!(!together || lanes > steps + 8, "k {k}: {lanes} lanes in {steps} steps: lanes shared steps");
        for (i, (d, p)) in drafted.iter().zip(&plain).enumerate() {
            assert_eq!(d, p, "k {k}, together {together}, temperature {temperature}: request {i} differs from plain");
        }
        let text = h.metrics().render();
        assert!(text.contains(&format!("tf:spec_decode_num_accepted_tokens_total {accepted}\n")), "{text}");
    }
}

#[test]
fn greedy_drafted_replies_equal_plain_ones_on_tiny() {
    check(tiny(), 512, 0.0, &[(5, false), (2, true), (5, true)]);
}

#[test]
fn seeded_sampled_drafted_replies_equal_plain_ones_on_tiny() {
    check(tiny(), 512, 0.9, &[(5, false), (2, true), (5, true)]);
}

#[test]
fn greedy_and_sampled_drafted_replies_equal_plain_ones_on_small() {
    check(small_dir(), 129_280, 0.0, &[(5, true)]);
    check(small_dir(), 129_280, 0.7, &[(2, true)]);
}

#[test]
fn no_draft_requests_and_teacher_forcing_never_draft() {
    let h = host(tiny(), Limits { draft_len: Some(3), ..Limits::default() });
    let plain = GenRequest { no_draft: true, ..req(2, 512, 0.0) };
    let forced = GenRequest { forced: vec![9, 10, 11, 12], ..req(3, 512, 0.0) };
    for r in [plain, forced] {
        let events: Vec<Event> = h.submit(r).unwrap().into_iter().collect();
        assert!(matches!(events.last(), Some(Event::Done { .. })), "{events:?}");
    }
    assert_eq!(h.metrics().drafting(), (0, 0, 0));
}
