//! `gate_rows MODEL_DIR SEQS_JSON OUT_F32 [exact|sequential-sums]`: CPU logits from each `{"ids", "head"}`'s head on (prefill, then windows of 16, as the gate), for noise_floor.py's `ours-*`.
use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert!(matches!(args.len(), 4 | 5), "usage: gate_rows MODEL_DIR SEQS_JSON OUT_F32 [exact|sequential-sums]");
    let sequential_sums = match args.get(4).map_or("exact", String::as_str) {
        "exact" => false,
        "sequential-sums" => true,
        other => panic!("unknown switch {other}: exact or sequential-sums"),
    };
    let opts = tf_dsv41::Options { sequential_sums, ..Default::default() };
    let model = tf_dsv41::Model::load(std::path::Path::new(&args[1]), opts).expect("model loads");
    let seqs: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&args[2]).expect("seqs")).unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(&args[3]).expect("out file"));
    for s in &seqs {
        let ids: Vec<u32> = serde_json::from_value(s["ids"].clone()).expect("ids");
        let head = s["head"].as_u64().expect("head") as usize;
        assert!(head >= 1 && head <= ids.len(), "head {head} of {} ids", ids.len());
        let mut st = model.new_state();
        let mut rows = vec![model.prefill(&mut st, &ids[..head], true).unwrap().unwrap()];
        for w in ids[head..].chunks(16) {
            rows.extend(model.decode(&mut st, w).unwrap());
        }
        for r in &rows {
            r.iter().for_each(|v| out.write_all(&v.to_le_bytes()).unwrap());
        }
    }
}
