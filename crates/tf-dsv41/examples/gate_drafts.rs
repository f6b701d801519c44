//! `gate_drafts MODEL_DIR PROMPTS_JSON EVERY OUT_STEM`: DSpark drafts after every EVERY-th prompt row (STEM.json, row logits in STEM.f32).
use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert!(args.len() == 5, "usage: gate_drafts MODEL_DIR PROMPTS_JSON EVERY OUT_STEM");
    let opts = tf_dsv41::Options { replay: false, ..Default::default() };
    let model = tf_dsv41::Model::load(std::path::Path::new(&args[1]), opts).expect("model loads");
    let prompts: Vec<Vec<u32>> = serde_json::from_str(&std::fs::read_to_string(&args[2]).expect("prompts")).unwrap();
    let every: usize = args[3].parse().expect("EVERY is a count");
    let block = model.cfg.dspark_block_size;
    let mut logits = std::io::BufWriter::new(std::fs::File::create(format!("{}.f32", args[4])).expect("out"));
    let mut records = Vec::new();
    for (pi, ids) in prompts.iter().enumerate() {
        // Anchor p: rows 0..=p prefilled, then the draft block after the true token p+1.
        for p in (every - 1..ids.len().saturating_sub(block + 1)).step_by(every) {
            let mut st = model.new_state();
            model.prefill(&mut st, &ids[..=p], true).unwrap();
            let (d, rows) = model.draft_with_logits(&mut st, ids[p + 1]).unwrap();
            rows.iter().flatten().for_each(|v| logits.write_all(&v.to_le_bytes()).unwrap());
            records
                .push(serde_json::json!({"prompt": pi, "anchor": p, "drafts": d.tokens, "confidence": d.confidence}));
        }
    }
    std::fs::write(format!("{}.json", args[4]), serde_json::to_string(&records).unwrap()).unwrap();
}
