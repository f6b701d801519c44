//! Tensor parallel behind the lane host and HTTP (issue 25): TP2/TP3 replies, with drafts and 8 at a time, equal one rank's.

mod common;

use common::{chat_body, post, server, start_with, tiny};
use serde_json::json;
use std::time::Duration;
use tf_server::http::serve::ServeConfig;
use tf_server::lanes::{Event, GenRequest, LaneHost, Limits, SamplingParams};

fn reqs() -> Vec<GenRequest> {
    (0..8u32)
        .map(|i| {
            let prompt = (0..1 + 9 * i).map(|k| 4 + (k * 37 + i * 11) % 500).collect();
            let temperature = if i % 2 == 0 { 0.0 } else { 0.8 };
            let sampling = SamplingParams { temperature, top_k: 0, top_p: 1.0, seed: 5 + u64::from(i) };
            GenRequest { prompt, max_tokens: 16, sampling, logprobs: Some(2), ..GenRequest::default() }
        })
        .collect()
}

fn together(h: &LaneHost) -> Vec<Vec<Event>> {
    let rxs: Vec<_> = reqs().into_iter().map(|r| h.submit(r).unwrap()).collect();
    rxs.into_iter().map(|rx| rx.into_iter().collect()).collect()
}

#[test]
fn tp_lane_hosts_with_drafts_equal_one_plain_rank() {
    let plain = {
        let model = tf_server::lanes::load_dsv41(tiny(), tf_dsv41::Options::default()).unwrap();
        together(&LaneHost::spawn(model, Limits { draft: false, ..Limits::default() }))
    };
    // TP2 splits the experts alone, TP3 the heads too (as `tf serve --tp` does by default), TP4 each expert by width.
    for (world, split_heads, expert_width) in [(2, false, false), (3, true, false), (4, true, true)] {
        let opts = tf_dsv41::Options { split_heads, expert_width, ..tf_dsv41::Options::default() };
        let (leader, _followers) = tf_dsv41::tp::spawn(tiny(), opts, world, Duration::from_secs(60)).unwrap();
        let h = LaneHost::spawn(leader, Limits { draft_len: Some(3), ..Limits::default() });
        let got = together(&h);
        assert!(h.metrics().drafting().0 > 0, "TP{world} drafted");
        for (i, (g, p)) in got.iter().zip(&plain).enumerate() {
            assert_eq!(g, p, "TP{world}: request {i} differs from one plain rank");
        }
    }
}

#[test]
fn tf_serve_tp2_answers_as_one_rank_does() {
    let profile = tempfile::tempdir().unwrap();
    let tp = start_with(ServeConfig { tp: 2, tp_profile: Some(profile.path().into()), ..ServeConfig::default() });
    let body = chat_body(json!({"max_tokens": 12, "logprobs": true, "top_logprobs": 2}));
    let (s1, one) = post(server(), "/v1/chat/completions", &body);
    let (s2, two) = post(&tp, "/v1/chat/completions", &body);
    assert_eq!((s1, s2), (200, 200), "{two}");
    assert_eq!(one["choices"], two["choices"]);
    let width = start_with(ServeConfig { tp: 3, tp_expert_width: true, ..ServeConfig::default() });
    let (s3, three) = post(&width, "/v1/chat/completions", &body);
    assert_eq!((s3, &one["choices"]), (200, &three["choices"]), "--tp 3 --tp-experts width: {three}");
    // --tp-profile: both ranks logged the same gathers (frames, expert outputs, split heads) in the same order.
    let ranks = tf_collective::profile::read_dir(profile.path()).unwrap();
    assert_eq!(ranks.len(), 2);
    let n = ranks[0].len().min(ranks[1].len());
    let ops = |r: usize| ranks[r][..n].iter().map(|x| x.op.as_str()).collect::<Vec<_>>();
    assert!(ops(0).iter().filter(|o| **o == "all_gather").count() > 12, "{:?}", ops(0));
    assert_eq!(ops(0), ops(1));
    assert!(ranks[0].iter().all(|x| x.ok && x.ready_us <= x.end_us && x.seq < ranks[0].len() as u64));
    let summary = tf_collective::profile::summarize(&ranks);
    assert!(summary.contains("all_gather") && summary.starts_with("2 ranks"), "{summary}");
}

/// A free loopback port outside the range the ranks' own `:0` listeners draw from.
fn port() -> u16 {
    tf_collective::spare_loopback_port().unwrap()
}

fn rank(r: usize, http: u16, meet: u16) -> std::process::Child {
    let dir = tiny().to_str().unwrap().to_string();
    let args = ["serve", "--model", &dir, "--port", &http.to_string(), "--tp", "2", "--tp-rank", &r.to_string()];
    std::process::Command::new(env!("CARGO_BIN_EXE_tf"))
        .args(args)
        .args(["--tp-addr", &format!("127.0.0.1:{meet}"), "--tp-deadline-ms", "2000"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn two_processes_over_tcp_answer_as_one_rank_and_a_killed_rank_exits_the_leader_with_70() {
    let (http, meet) = (port(), port());
    let (mut leader, mut follower) = (rank(0, http, meet), rank(1, http, meet));
    let base = format!("http://127.0.0.1:{http}");
    let t = std::time::Instant::now();
    while common::get(&base, "/health").0 != 200 {
        assert!(t.elapsed() < Duration::from_secs(120), "the TP2 server never became healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
    let body = chat_body(json!({"max_tokens": 10, "logprobs": true, "top_logprobs": 2}));
    let (one, two) = (post(server(), "/v1/chat/completions", &body), post(&base, "/v1/chat/completions", &body));
    assert_eq!((one.0, two.0), (200, 200), "{}", two.1);
    assert_eq!(one.1["choices"], two.1["choices"], "two processes over TCP give one rank's reply");
    follower.kill().unwrap();
    follower.wait().unwrap();
    let t = std::time::Instant::now();
    // The leader exits inside this request: no reply, or a connection error, is what a client sees.
    let sent = common::agent().post(&format!("{base}/v1/chat/completions")).send(body.to_string().as_bytes());
    assert!(sent.is_err() || sent.is_ok_and(|r| r.status() != 200), "no reply from a group that lost a rank");
    let code = loop {
        if let Some(s) = leader.try_wait().unwrap() {
            break s.code();
        }
        assert!(t.elapsed() < Duration::from_secs(10), "the leader did not exit after its follower died");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(70), "lockstep_lost exits 70 for a supervisor");
}
