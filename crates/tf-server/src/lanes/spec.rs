//! DSpark drafting in the lane host (issue 26): verify windows sized from confidences and measured costs; docs/drafting.md.

use super::Family;
use std::time::Instant;

/// Most draft tokens per window (DSpark's block of 5).
pub const MAX_DRAFT: usize = 5;
/// Plain steps a lane takes after a window whose best length did not beat plain decode (doubling while it keeps losing).
const BACKOFF: u32 = 8;
const MAX_BACKOFF: u32 = 256;
/// Timed repetitions of each window length at start-up (the minimum is kept).
const REPS: usize = 3;

/// Seconds per call measured once on the host's family: a verify window of `1 + k` rows, and one draft.
#[derive(Clone, Debug, PartialEq)]
pub struct Costs {
    /// `window[k]`: a window of `k + 1` rows.
    pub window: Vec<f64>,
    pub draft: f64,
}

impl Costs {
    /// Times windows of 1 to 6 rows and one draft on a scratch lane (a short prompt, rewound after each window).
    pub fn measure<F: Family>(family: &F) -> Option<Costs> {
        if !family.drafts() {
            return None;
        }
        let mut lane = family.new_lane().ok()?;
        let prompt: Vec<u32> = (0..16).map(|i| (i + 1) % family.vocab_size() as u32).collect();
        family.prefill(&mut lane, &prompt, true).ok()?;
        // A family that drafts nothing is never asked to verify or rewind.
        family.draft(&mut lane, prompt[0], MAX_DRAFT).ok()??;
        let mut window = vec![f64::INFINITY; MAX_DRAFT + 1];
        let mut draft = f64::INFINITY;
        for _ in 0..REPS {
            for (k, best) in window.iter_mut().enumerate() {
                let t = Instant::now();
                family.verify(&mut lane, &prompt[..k + 1]).ok()?;
                *best = best.min(t.elapsed().as_secs_f64());
                family.rewind(&mut lane, 0).ok()?;
            }
            let t = Instant::now();
            family.draft(&mut lane, prompt[0], MAX_DRAFT).ok()??;
            draft = draft.min(t.elapsed().as_secs_f64());
        }
        let costs = Costs { window, draft };
        let wins = costs.can_win();
        tracing::info!(window_s = ?costs.window, draft_s = costs.draft, wins, "drafting: window and draft seconds measured");
        // Where even windows that keep every draft lose to plain decode (a compute-bound CPU), nothing is drafted.
        costs.can_win().then_some(costs)
    }

    /// Whether some window length beats plain decode when every draft is kept.
    pub fn can_win(&self) -> bool {
        let plain = 1.0 / self.window[0];
        self.window.iter().enumerate().skip(1).any(|(k, w)| (k + 1) as f64 / (w + self.draft) > plain)
    }

    /// The draft length with the most expected tokens per second of window, and whether drafting beat plain decode.
    pub fn choose(&self, confidence: &[f32]) -> (usize, bool) {
        let (mut best, mut survive, mut expected) = ((0, 1.0 / self.window[0]), 1.0, 1.0);
        for (i, &c) in confidence.iter().enumerate().take(self.window.len() - 1) {
            survive *= 1.0 / (1.0 + (-f64::from(c)).exp());
            expected += survive;
            let rate = expected / self.window[i + 1];
            if rate > best.1 {
                best = (i + 1, rate);
            }
        }
        let with_draft =
            if best.0 == 0 { 0.0 } else { best.1 * self.window[best.0] / (self.window[best.0] + self.draft) };
        (best.0, with_draft > 1.0 / self.window[0])
    }
}

/// What one lane's drafting has done, shared with its request's events for the usage block.
#[derive(Debug, Default)]
pub struct DraftCounts {
    pub drafted: std::sync::atomic::AtomicUsize,
    pub accepted: std::sync::atomic::AtomicUsize,
}

impl DraftCounts {
    pub(super) fn add(&self, drafted: usize, accepted: usize) {
        self.drafted.fetch_add(drafted, std::sync::atomic::Ordering::Relaxed);
        self.accepted.fetch_add(accepted, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Per-lane drafting state.
#[derive(Debug)]
pub(super) struct LaneDraft {
    pub on: bool,
    pub skip: u32,
    backoff: u32,
}

impl LaneDraft {
    pub(super) fn new(on: bool) -> LaneDraft {
        LaneDraft { on, skip: 0, backoff: BACKOFF }
    }

    /// Whether this step drafts; a lane backing off counts its plain steps down.
    pub(super) fn wants(&mut self) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        self.on
    }

    /// After a losing window: plain steps, twice as many as after the last loss (up to 256).
    pub(super) fn back_off(&mut self) {
        self.skip = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// After a winning window: the next loss backs off from the start again.
    pub(super) fn won(&mut self) {
        self.backoff = BACKOFF;
    }

    /// A new lane starts as far backed off as the host's last lane ended (`hint` plain steps), so losing drafts are not re-learned per request.
    pub(super) fn learned(mut self, hint: u32) -> LaneDraft {
        self.skip = hint;
        self.backoff = (hint * 2).clamp(BACKOFF, MAX_BACKOFF);
        self
    }

    /// The hint a new lane should start from after this lane's last window.
    pub(super) fn hint(&self) -> u32 {
        self.skip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_length_follows_the_confidences_and_the_costs() {
        let gpu = Costs { window: vec![6.58, 9.80, 11.51, 13.14, 15.15, 16.79], draft: 1.0 };
        assert!(gpu.can_win());
        assert_eq!(gpu.choose(&[-9.0; 5]), (0, false), "drafts that never survive: plain decode");
        assert_eq!(gpu.choose(&[9.0; 5]), (5, true), "drafts that always survive: the longest window");
        assert_eq!(gpu.choose(&[9.0, 9.0, -9.0, 9.0, 9.0]).0, 2, "the third draft almost surely fails");
        let cpu = Costs { window: vec![9.6, 20.9, 24.3, 35.6, 38.7, 51.3], draft: 36.6 };
        assert!(!cpu.can_win(), "even full acceptance loses on this machine's costs");
    }

    #[test]
    fn a_losing_lane_backs_off_longer_each_time_and_resets_on_a_win() {
        let mut d = LaneDraft::new(true);
        d.back_off();
        assert_eq!((0..8).filter(|_| d.wants()).count(), 0);
        assert!(d.wants());
        d.back_off();
        assert_eq!((0..16).filter(|_| d.wants()).count(), 0);
        d.won();
        d.back_off();
        assert_eq!(d.skip, BACKOFF);
        let next = LaneDraft::new(true).learned(32);
        assert_eq!((next.skip, next.backoff), (32, 64), "a new lane starts where the last one left off");
    }
}
