//! `gate_logits MODEL_DIR PROMPTS_JSON OUT_F32`: teacher-forced CPU logits of every prompt row (rows × vocab f32), for tools/gate_model.
use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert!(args.len() == 4, "usage: gate_logits MODEL_DIR PROMPTS_JSON OUT_F32");
    let opts = tf_dsv41::Options { replay: false, ..Default::default() };
    let model = tf_dsv41::Model::load(std::path::Path::new(&args[1]), opts).expect("model loads");
    let prompts: Vec<Vec<u32>> = serde_json::from_str(&std::fs::read_to_string(&args[2]).expect("prompts")).unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(&args[3]).expect("out file"));
    for ids in &prompts {
        let t = std::time::Instant::now();
        let mut st = model.new_state();
        // One row prefilled, the rest as one chunk: chunked prefill is logit-exact against one shot and yields every row.
        let mut rows = vec![model.prefill(&mut st, &ids[..1], true).unwrap().unwrap()];
        if ids.len() > 1 {
            rows.extend(model.decode(&mut st, &ids[1..]).unwrap());
        }
        for r in &rows {
            r.iter().for_each(|v| out.write_all(&v.to_le_bytes()).unwrap());
        }
        eprintln!("{} rows in {:?}", rows.len(), t.elapsed());
    }
}
