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
    for world in [2, 3] {
        let (leader, _followers) =
            tf_dsv41::tp::spawn(tiny(), tf_dsv41::Options::default(), world, Duration::from_secs(60)).unwrap();
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
    let tp = start_with(ServeConfig { tp: 2, ..ServeConfig::default() });
    let body = chat_body(json!({"max_tokens": 12, "logprobs": true, "top_logprobs": 2}));
    let (s1, one) = post(server(), "/v1/chat/completions", &body);
    let (s2, two) = post(&tp, "/v1/chat/completions", &body);
    assert_eq!((s1, s2), (200, 200), "{two}");
    assert_eq!(one["choices"], two["choices"]);
}
