//! `gate_nll MODEL_DIR HELDOUT_NPY [WINDOWS] [SEQ]`: held-out NLL of the Rust CPU forward on train.py's evaluation windows.

#[path = "common/held.rs"]
mod held;

/// f64 log-sum-exp of one logits row minus the target's logit: the row's NLL.
fn row_nll(row: &[f32], target: u32) -> f64 {
    let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let lse = m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
    lse - row[target as usize] as f64
}

fn main() {
    let (model, held, windows, seq) = held::open("gate_nll MODEL_DIR HELDOUT_NPY [WINDOWS=64] [SEQ=512]", (64, 512));
    let n = windows.min(((held.len() - 2) / seq).max(1));
    let span = (held.len() - seq - 2) as f64;
    let (mut total, mut count) = (0.0f64, 0usize);
    // NLL per 512 positions: the model trained on 512-token windows, so longer windows show what lies past them.
    let mut by_pos = vec![(0.0f64, 0usize); seq.div_ceil(512)];
    for i in 0..n {
        // np.linspace(0, len - seq - 2, n).astype(int64) as train.py's evaluate picks them: i * step, the last one exact.
        let start = match n {
            1 => 0,
            _ if i == n - 1 => span as usize,
            _ => (i as f64 * (span / (n - 1) as f64)) as usize,
        };
        let w = &held[start..start + seq + 1];
        let mut st = model.new_state();
        let mut rows = vec![model.prefill(&mut st, &w[..1], true).unwrap().unwrap()];
        rows.extend(model.decode(&mut st, &w[1..seq]).unwrap());
        let nlls: Vec<f64> = rows.iter().zip(&w[1..]).map(|(r, &t)| row_nll(r, t)).collect();
        for (p, v) in nlls.iter().enumerate() {
            by_pos[p / 512].0 += v;
            by_pos[p / 512].1 += 1;
        }
        let sum: f64 = nlls.iter().sum();
        total += sum;
        count += seq;
        eprintln!("window {i} at {start}: nll {:.4}", sum / seq as f64);
    }
    let nll = total / count as f64;
    let by_512: Vec<f64> = by_pos.iter().map(|&(s, c)| s / c as f64).collect();
    println!(
        "{}",
        serde_json::json!({"windows": n, "seq": seq, "tokens": held.len(), "nll": nll, "ppl": nll.exp(), "nll_by_512": by_512})
    );
}
