//! Counters and latency histograms the lane host keeps, rendered in Prometheus text format for `/metrics`.

use parking_lot::Mutex;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bucket upper bounds in seconds, shared by every latency histogram (vLLM's TTFT buckets, widened for the CPU).
const BUCKETS: [f64; 18] =
    [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 30.0, 120.0];

/// A cumulative histogram of seconds.
#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (c, &le) in self.counts.iter_mut().zip(&BUCKETS) {
            if secs <= le {
                *c += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (c, le) in self.counts.iter().zip(BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}",
            self.count, self.sum, self.count
        );
    }
}

/// How a request left the host, as counted in `tf:request_success_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Stop,
    Length,
    Abort,
    Error,
}

const OUTCOMES: [(Outcome, &str); 4] =
    [(Outcome::Stop, "stop"), (Outcome::Length, "length"), (Outcome::Abort, "abort"), (Outcome::Error, "error")];

/// Everything `/metrics` reports; shared between the scheduler thread and the HTTP side.
#[derive(Debug, Default)]
pub struct Metrics {
    pub(crate) running: AtomicUsize,
    pub(crate) waiting: AtomicUsize,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    cache_queries: AtomicU64,
    cache_hits: AtomicU64,
    outcomes: [AtomicU64; 4],
    ttft: Mutex<Histogram>,
    itl: Mutex<Histogram>,
    e2e: Mutex<Histogram>,
    /// Verify windows, draft tokens proposed, accepted, and accepted by draft position.
    windows: AtomicU64,
    drafted: AtomicU64,
    accepted: AtomicU64,
    accepted_at: [AtomicU64; super::spec::MAX_DRAFT],
    /// Decode steps (rows and verify windows), and the lanes they ran together.
    rounds: AtomicU64,
    round_lanes: AtomicU64,
}

impl Metrics {
    pub(crate) fn prompt_admitted(&self, prompt: usize, cached: usize) {
        self.prompt_tokens.fetch_add(prompt as u64, Ordering::Relaxed);
        self.cache_queries.fetch_add(prompt as u64, Ordering::Relaxed);
        self.cache_hits.fetch_add(cached as u64, Ordering::Relaxed);
    }

    /// One generated token; `first` is the time since submission for the first, else the gap since the last one.
    pub(crate) fn token(&self, first: bool, secs: f64) {
        self.generation_tokens.fetch_add(1, Ordering::Relaxed);
        let h = if first { &self.ttft } else { &self.itl };
        h.lock().observe(secs);
    }

    /// One verify window of `drafted` draft tokens, the first `accepted` of them kept.
    pub(crate) fn window(&self, drafted: usize, accepted: usize) {
        self.windows.fetch_add(1, Ordering::Relaxed);
        self.drafted.fetch_add(drafted as u64, Ordering::Relaxed);
        self.accepted.fetch_add(accepted as u64, Ordering::Relaxed);
        for c in &self.accepted_at[..accepted.min(self.accepted_at.len())] {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One decode step over `lanes` lanes at once.
    pub(crate) fn decode_round(&self, lanes: usize) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
        self.round_lanes.fetch_add(lanes as u64, Ordering::Relaxed);
    }

    /// (decode steps, lanes run in them) so far.
    pub fn decode_rounds(&self) -> (u64, u64) {
        (self.rounds.load(Ordering::Relaxed), self.round_lanes.load(Ordering::Relaxed))
    }

    /// (windows, draft tokens, accepted draft tokens) so far.
    pub fn drafting(&self) -> (u64, u64, u64) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (get(&self.windows), get(&self.drafted), get(&self.accepted))
    }

    pub(crate) fn finished(&self, outcome: Outcome, e2e_secs: f64) {
        let i = OUTCOMES.iter().position(|(o, _)| *o == outcome).expect("every outcome is listed");
        self.outcomes[i].fetch_add(1, Ordering::Relaxed);
        self.e2e.lock().observe(e2e_secs);
    }

    /// Prompt tokens served from the prefix cache so far.
    pub fn cache_hit_tokens(&self) -> u64 {
        self.cache_hits.load(Ordering::Relaxed)
    }

    /// Requests finished with this outcome so far.
    pub fn outcome_count(&self, outcome: Outcome) -> u64 {
        let i = OUTCOMES.iter().position(|(o, _)| *o == outcome).expect("every outcome is listed");
        self.outcomes[i].load(Ordering::Relaxed)
    }

    /// Prometheus text exposition of every metric, names prefixed `tf:` as vLLM prefixes `vllm:`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let gauge = |out: &mut String, name: &str, help: &str, v: usize| {
            let _ = writeln!(out, "# HELP tf:{name} {help}\n# TYPE tf:{name} gauge\ntf:{name} {v}");
        };
        gauge(&mut out, "num_requests_running", "Requests holding a lane.", self.running.load(Ordering::SeqCst));
        gauge(&mut out, "num_requests_waiting", "Requests queued for a lane.", self.waiting.load(Ordering::SeqCst));
        let counters = [
            ("prompt_tokens_total", "Prompt tokens admitted.", &self.prompt_tokens),
            ("generation_tokens_total", "Tokens generated.", &self.generation_tokens),
            ("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", &self.cache_queries),
            ("prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", &self.cache_hits),
            ("spec_decode_num_drafts_total", "DSpark verify windows.", &self.windows),
            ("spec_decode_num_draft_tokens_total", "Draft tokens verified.", &self.drafted),
            ("spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", &self.accepted),
            ("decode_steps_total", "Decode steps (a round's rows and verify windows in one step).", &self.rounds),
            ("decode_step_lanes_total", "Lanes decoded in those steps.", &self.round_lanes),
        ];
        for (name, help, c) in counters {
            let _ = writeln!(
                out,
                "# HELP tf:{name} {help}\n# TYPE tf:{name} counter\ntf:{name} {}",
                c.load(Ordering::Relaxed)
            );
        }
        let name = "tf:spec_decode_num_accepted_tokens_per_pos_total";
        let _ = writeln!(out, "# HELP {name} Draft tokens accepted, by position in the draft.\n# TYPE {name} counter");
        for (pos, c) in self.accepted_at.iter().enumerate() {
            let _ = writeln!(out, "{name}{{position=\"{pos}\"}} {}", c.load(Ordering::Relaxed));
        }
        let (windows, _, accepted) = self.drafting();
        let mean = if windows == 0 { 0.0 } else { 1.0 + accepted as f64 / windows as f64 };
        let name = "tf:spec_decode_mean_accepted_length";
        let _ = writeln!(
            out,
            "# HELP {name} Tokens per verify window (accepted drafts plus one).\n# TYPE {name} gauge\n{name} {mean}"
        );
        let _ = writeln!(out, "# HELP tf:request_success_total Finished requests by reason.");
        let _ = writeln!(out, "# TYPE tf:request_success_total counter");
        for ((_, label), c) in OUTCOMES.iter().zip(&self.outcomes) {
            let _ =
                writeln!(out, "tf:request_success_total{{finished_reason=\"{label}\"}} {}", c.load(Ordering::Relaxed));
        }
        let hists = [
            ("time_to_first_token_seconds", "Submission to first token.", &self.ttft),
            ("inter_token_latency_seconds", "Gap between consecutive tokens.", &self.itl),
            ("e2e_request_latency_seconds", "Submission to the end of the request.", &self.e2e),
        ];
        for (name, help, h) in hists {
            h.lock().render(&mut out, &format!("tf:{name}"), help);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counters_render() {
        let m = Metrics::default();
        m.token(true, 0.03);
        m.token(false, 0.5);
        m.token(false, 200.0);
        m.prompt_admitted(100, 64);
        m.finished(Outcome::Length, 1.0);
        let text = m.render();
        assert!(text.contains("tf:time_to_first_token_seconds_bucket{le=\"0.02\"} 0\n"));
        assert!(text.contains("tf:time_to_first_token_seconds_bucket{le=\"0.04\"} 1\n"));
        assert!(text.contains("tf:inter_token_latency_seconds_bucket{le=\"120\"} 1\n"));
        assert!(text.contains("tf:inter_token_latency_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("tf:generation_tokens_total 3\n"));
        assert!(text.contains("tf:prefix_cache_hits_total 64\n"));
        assert!(text.contains("tf:request_success_total{finished_reason=\"length\"} 1\n"));
        assert_eq!(m.outcome_count(Outcome::Length), 1);
    }
}
