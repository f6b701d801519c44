//! `gate_accept MODEL_DIR HELDOUT_NPY [ANCHORS=64] [CTX=256]`: DSpark drafts against the model's own greedy tokens (what greedy verification accepts).

#[path = "common/held.rs"]
mod held;

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}

fn main() {
    let (model, held, anchors, ctx) = held::open("gate_accept MODEL_DIR HELDOUT_NPY [ANCHORS=64] [CTX=256]", (64, 256));
    let block = model.cfg.dspark_block_size;
    let (mut accepted, mut per_row) = (0usize, vec![0usize; block]);
    for a in 0..anchors {
        let span = held.len() - ctx - 1;
        let start = if anchors == 1 { 0 } else { span * a / (anchors - 1) };
        let prompt = &held[start..start + ctx];
        let (mut st, mut verify) = (model.new_state(), model.new_state());
        let next = argmax(&model.prefill(&mut st, prompt, true).unwrap().unwrap());
        let drafts = model.draft(&mut st, next).unwrap().tokens;
        // The target's own greedy continuation after `next`, from a state that never saw the drafts.
        model.prefill(&mut verify, prompt, true).unwrap();
        let (mut tok, mut run) = (next, true);
        for (i, &d) in drafts.iter().enumerate() {
            tok = argmax(&model.decode(&mut verify, &[tok]).unwrap().remove(0));
            per_row[i] += usize::from(d == tok);
            run &= d == tok;
            accepted += usize::from(run);
        }
    }
    let n = anchors as f64;
    let rows: Vec<f64> = per_row.iter().map(|&c| c as f64 / n).collect();
    println!(
        "{}",
        serde_json::json!({"anchors": anchors, "ctx": ctx, "block": block, "accepted_mean": accepted as f64 / n, "row_match": rows})
    );
}
