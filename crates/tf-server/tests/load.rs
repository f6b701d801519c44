//! A short loopback load test: a few hundred requests at several concurrency levels, none lost, memory flat after.

mod common;

use common::{post, start_with};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tf_server::http::serve::ServeConfig;

/// Resident set size of this process (the server runs in it), from /proc.
fn rss_bytes() -> usize {
    tf_server::http::resident_bytes(None).expect("VmRSS in /proc/self/status") as usize
}

/// Sends `total` requests from `concurrency` client threads; returns how many came back complete.
fn round(base: &str, concurrency: usize, total: usize) -> usize {
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..concurrency)
        .map(|_| {
            let (base, next, ok) = (base.to_string(), next.clone(), ok.clone());
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= total {
                        break;
                    }
                    let words: Vec<String> = (0..3 + i % 40).map(|k| format!("w{}", 5 + (k * 13 + i) % 300)).collect();
                    let stream = i % 3 == 0;
                    let body = json!({"prompt": words.join(" "), "max_tokens": 3, "temperature": 0.5, "seed": i, "stream": stream});
                    let (status, v) = post(&base, "/v1/completions", &body);
                    let complete = if stream {
                        v.as_str().is_some_and(|t| t.trim_end().ends_with("data: [DONE]") && !t.contains("\"error\""))
                    } else {
                        v["usage"]["completion_tokens"].as_u64().is_some_and(|n| (1..=3).contains(&n))
                    };
                    assert_eq!(status, 200, "request {i}: {v}");
                    assert!(complete, "request {i} came back incomplete: {v}");
                    ok.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    ok.load(Ordering::SeqCst)
}

#[test]
fn hundreds_of_requests_at_several_concurrency_levels() {
    let base = start_with(ServeConfig::default());
    let t = Instant::now();
    let levels = [(1, 20), (4, 40), (16, 90)];
    let mut rss = Vec::new();
    for pass in 0..2 {
        for (concurrency, total) in levels {
            assert_eq!(round(&base, concurrency, total), total, "pass {pass}, {concurrency} clients: none lost");
        }
        rss.push(rss_bytes());
    }
    assert!(t.elapsed() < Duration::from_secs(900), "bounded: {:?}", t.elapsed());
    let settled = Instant::now();
    let m = loop {
        let (s, m) = common::get(&base, "/metrics");
        assert_eq!(s, 200);
        if m.contains("tf:num_requests_running 0") && m.contains("tf:num_requests_waiting 0") {
            break m;
        }
        assert!(settled.elapsed() < Duration::from_secs(30), "lanes never emptied: {m}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(m.contains("tf:request_success_total{finished_reason=\"error\"} 0"), "{m}");
    let growth = rss[1].saturating_sub(rss[0]);
    assert!(growth < 24 << 20, "memory is flat across the second pass: {} MiB more", growth >> 20);
    eprintln!("load: 300 requests in {:.1} s, RSS {} → {} MiB", t.elapsed().as_secs_f64(), rss[0] >> 20, rss[1] >> 20);
}
