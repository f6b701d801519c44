//! The gate's statistics: KL(exact ‖ candidate), greedy agreement, top-1 and NLL on the reference continuation.

use serde_json::{Value, json};

/// One scored position: the exact and candidate logits for the token that follows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowScore {
    pub kl: f64,
    /// The candidate's greedy token equals the exact path's.
    pub agree: bool,
    /// Greedy token equals the reference continuation's next token.
    pub hit_exact: bool,
    pub hit_cand: bool,
    pub nll_exact: f64,
    pub nll_cand: f64,
    /// The exact path's own top-1 probability: how sure the model is at this row.
    pub p_top1: f64,
}

/// Rows whose exact top-1 probability is at least this count as sure: a change of order rarely flips them (docs/numerics.md).
pub const SURE: f64 = 0.5;

/// Log-softmax in f64 (one max, one sum), so the statistics add no rounding of their own worth measuring.
pub fn log_softmax64(x: &[f32]) -> Vec<f64> {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln() + m;
    x.iter().map(|&v| v as f64 - lse).collect()
}

/// Scores one position whose reference next token is `next`.
pub fn score_row(exact: &[f32], cand: &[f32], next: u32) -> RowScore {
    let (lp, lq) = (log_softmax64(exact), log_softmax64(cand));
    let kl: f64 = lp.iter().zip(&lq).map(|(&p, &q)| if p == f64::NEG_INFINITY { 0.0 } else { p.exp() * (p - q) }).sum();
    let (ge, gc) = (tf_core::ops::argmax(exact), tf_core::ops::argmax(cand));
    RowScore {
        kl: kl.max(0.0),
        agree: ge == gc,
        hit_exact: ge == next,
        hit_cand: gc == next,
        nll_exact: -lp[next as usize],
        nll_cand: -lq[next as usize],
        p_top1: lp[ge as usize].exp(),
    }
}

/// Scores of a group of positions (one prompt kind, or all).
#[derive(Clone, Debug, Default)]
pub struct Tally {
    kl: Vec<f64>,
    agree: usize,
    hit_exact: usize,
    hit_cand: usize,
    nll_exact: f64,
    nll_cand: f64,
    sure: usize,
    agree_sure: usize,
}

/// What a tally reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub positions: usize,
    pub kl_mean: f64,
    pub kl_p99: f64,
    pub kl_max: f64,
    pub agreement: f64,
    pub top1_exact: f64,
    pub top1_cand: f64,
    pub nll_exact: f64,
    pub nll_cand: f64,
    /// Share of rows whose exact top-1 probability is at least [`SURE`], and the agreement on those and on the rest.
    pub sure: f64,
    pub agreement_sure: f64,
    pub agreement_unsure: f64,
}

impl Tally {
    pub fn push(&mut self, r: RowScore) {
        self.kl.push(r.kl);
        self.agree += usize::from(r.agree);
        self.hit_exact += usize::from(r.hit_exact);
        self.hit_cand += usize::from(r.hit_cand);
        self.nll_exact += r.nll_exact;
        self.nll_cand += r.nll_cand;
        if r.p_top1 >= SURE {
            self.sure += 1;
            self.agree_sure += usize::from(r.agree);
        }
    }

    pub fn summary(&self) -> Summary {
        let n = self.kl.len();
        let per = |x: f64| if n == 0 { 0.0 } else { x / n as f64 };
        let mut sorted = self.kl.clone();
        sorted.sort_by(f64::total_cmp);
        Summary {
            positions: n,
            kl_mean: per(self.kl.iter().sum()),
            kl_p99: quantile(&sorted, 0.99),
            kl_max: sorted.last().copied().unwrap_or(0.0),
            agreement: per(self.agree as f64),
            top1_exact: per(self.hit_exact as f64),
            top1_cand: per(self.hit_cand as f64),
            nll_exact: per(self.nll_exact),
            nll_cand: per(self.nll_cand),
            sure: per(self.sure as f64),
            agreement_sure: ratio(self.agree_sure, self.sure),
            agreement_unsure: ratio(self.agree - self.agree_sure, n - self.sure),
        }
    }
}

/// `a / b`, 0 for no rows.
fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The nearest-rank quantile of sorted values (0 for none).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Summary {
    pub fn to_json(self) -> Value {
        json!({"positions": self.positions, "kl_mean": self.kl_mean, "kl_p99": self.kl_p99, "kl_max": self.kl_max,
            "greedy_agreement": self.agreement, "top1_exact": self.top1_exact, "top1_candidate": self.top1_cand,
            "nll_exact": self.nll_exact, "nll_candidate": self.nll_cand, "sure_share": self.sure,
            "agreement_sure": self.agreement_sure, "agreement_unsure": self.agreement_unsure})
    }

    /// One line for the terminal.
    pub fn line(self, name: &str) -> String {
        format!(
            "{name:<8} {:>6} pos  KL mean {:.3e} p99 {:.3e} max {:.3e}  agree {:.4}  top-1 {:.4} → {:.4}  NLL {:.4} → {:.4}  sure {:.3} (agree {:.4} / {:.4})",
            self.positions,
            self.kl_mean,
            self.kl_p99,
            self.kl_max,
            self.agreement,
            self.top1_exact,
            self.top1_cand,
            self.nll_exact,
            self.nll_cand,
            self.sure,
            self.agreement_sure,
            self.agreement_unsure
        )
    }
}

/// Limits declared before any candidate is measured (`assets/gate/thresholds.json`); `None`: not declared yet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Thresholds {
    /// The checkpoint (sha256 over its safetensors shards) the limits were derived on; `None`: none yet.
    pub gate_model: Option<String>,
    /// Copies of the gate model (sha256 → what each is) judged by the same limits: its EXL3 quant, which DeepSeek's reference cannot run.
    pub copies: Vec<String>,
    pub max_kl_mean: Option<f64>,
    pub max_kl_p99: Option<f64>,
    pub min_agreement: Option<f64>,
    pub max_top1_drop: Option<f64>,
    pub max_nll_increase: Option<f64>,
    /// Limits for greedy rows (the exact path's own continuations at cuts of each prompt); `None`: not declared.
    pub greedy: Option<GreedyRows>,
}

/// How greedy rows are taken and the limits declared for them (`greedy_rows` in thresholds.json).
#[derive(Clone, Debug, PartialEq)]
pub struct GreedyRows {
    /// Tokens the exact path generates at each cut.
    pub tokens: usize,
    /// The heads, as shares of each prompt.
    pub cuts: Vec<f64>,
    pub limits: Box<Thresholds>,
}

impl Thresholds {
    pub fn from_json(v: &Value) -> Result<Thresholds, String> {
        let num = |k: &str| match v.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x.as_f64().map(Some).ok_or_else(|| format!("thresholds: {k} must be a number or null")),
        };
        Ok(Thresholds {
            gate_model: v.get("gate_model").and_then(Value::as_str).map(str::to_string),
            copies: v
                .get("gate_model_copies")
                .and_then(Value::as_object)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
            max_kl_mean: num("max_kl_mean")?,
            max_kl_p99: num("max_kl_p99")?,
            min_agreement: num("min_greedy_agreement")?,
            max_top1_drop: num("max_top1_drop")?,
            max_nll_increase: num("max_nll_increase")?,
            greedy: match v.get("greedy_rows") {
                None | Some(Value::Null) => None,
                Some(g) => Some(GreedyRows::from_json(g)?),
            },
        })
    }

    /// Whether checkpoint `sha` is the declared gate model or one of its declared copies.
    pub fn judges(&self, sha: &str) -> bool {
        self.gate_model.as_deref() == Some(sha) || self.copies.iter().any(|c| c == sha)
    }

    /// The limits `s` breaks, each as a sentence; empty when it passes every declared one.
    pub fn failures(&self, s: &Summary) -> Vec<String> {
        let mut out = Vec::new();
        let mut above = |name: &str, got: f64, max: Option<f64>| {
            if let Some(m) = max.filter(|&m| got > m) {
                out.push(format!("{name} {got:.4e} is above {m:.4e}"));
            }
        };
        above("KL mean", s.kl_mean, self.max_kl_mean);
        above("KL p99", s.kl_p99, self.max_kl_p99);
        above("top-1 drop", s.top1_exact - s.top1_cand, self.max_top1_drop);
        above("NLL increase", s.nll_cand - s.nll_exact, self.max_nll_increase);
        above("greedy disagreement", 1.0 - s.agreement, self.min_agreement.map(|a| 1.0 - a));
        out
    }
}

impl GreedyRows {
    fn from_json(v: &Value) -> Result<GreedyRows, String> {
        let tokens = v.get("tokens").and_then(Value::as_u64).ok_or("thresholds: greedy_rows.tokens must be a count")?;
        let cuts: Option<Vec<f64>> =
            v.get("cuts").and_then(Value::as_array).map(|c| c.iter().filter_map(Value::as_f64).collect());
        let cuts = cuts.and_then(valid_cuts).ok_or("thresholds: greedy_rows.cuts must be shares in [0, 1)")?;
        Ok(GreedyRows { tokens: tokens as usize, cuts, limits: Box::new(Thresholds::from_json(v)?) })
    }
}

/// Cuts as the gate takes them: at least one, each a share of a prompt in [0, 1).
pub fn valid_cuts(cuts: Vec<f64>) -> Option<Vec<f64>> {
    (!cuts.is_empty() && cuts.iter().all(|f| (0.0..1.0).contains(f))).then_some(cuts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_model_and_its_declared_copies_are_judged_and_nothing_else() {
        let v =
            serde_json::json!({"gate_model": "aa", "gate_model_copies": {"bb": "its EXL3 copy"}, "max_kl_mean": 0.5});
        let th = Thresholds::from_json(&v).unwrap();
        assert!(th.judges("aa") && th.judges("bb") && !th.judges("cc") && !th.judges(""));
        assert!(!Thresholds::from_json(&serde_json::json!({})).unwrap().judges("aa"));
    }

    #[test]
    fn equal_rows_score_zero_and_agree() {
        let l = [1.0f32, 3.0, -2.0, 3.0];
        let r = score_row(&l, &l, 1);
        assert_eq!((r.kl, r.agree, r.hit_exact, r.hit_cand), (0.0, true, true, true));
        // Two logits of 3 tie for the top: each holds under half of the mass, so the row is not sure.
        assert!(r.p_top1 < SURE && r.p_top1 > 0.4, "{}", r.p_top1);
        assert_eq!(r.nll_exact, r.nll_cand);
        assert!((r.nll_exact - (1.0 + (-2.0f64).exp() + 1.0 + (-5.0f64).exp()).ln()).abs() < 1e-12);
    }

    #[test]
    fn kl_matches_its_closed_form() {
        let (p, q) = ([0.0f32, 0.0], [0.0f32, 2.0f32.ln()]);
        let kl = 0.5 * (0.5f64 / (1.0 / 3.0)).ln() + 0.5 * (0.5f64 / (2.0 / 3.0)).ln();
        let r = score_row(&p, &q, 0);
        assert!((r.kl - kl).abs() < 1e-7, "{} vs {kl} (ln 2 is rounded to f32 in q)", r.kl);
        assert!(!r.agree, "ties go to the lowest id, so exact picks 0 and the candidate 1");
        assert!(r.hit_exact && !r.hit_cand);
    }

    #[test]
    fn a_tally_reports_means_and_quantiles() {
        let mut t = Tally::default();
        for i in 0..100 {
            let r = RowScore {
                kl: i as f64,
                agree: i % 2 == 0,
                hit_exact: true,
                hit_cand: i < 90,
                nll_exact: 1.0,
                nll_cand: 1.5,
                // Rows 0..40 sure; of them the even ones agree (20), of the other 60 rows 30.
                p_top1: if i < 40 { 0.75 } else { 0.25 },
            };
            t.push(r);
        }
        let s = t.summary();
        assert_eq!((s.positions, s.kl_mean, s.kl_p99, s.kl_max), (100, 49.5, 98.0, 99.0));
        assert_eq!((s.sure, s.agreement_sure, s.agreement_unsure), (0.4, 0.5, 0.5));
        assert_eq!((s.agreement, s.top1_exact, s.top1_cand), (0.5, 1.0, 0.9));
        let th = Thresholds { max_top1_drop: Some(0.01), max_nll_increase: Some(0.6), ..Thresholds::default() };
        let f = th.failures(&s);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].starts_with("top-1 drop"));
    }
}
