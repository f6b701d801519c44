//! `expert_top_p MODEL_DIR IDS_JSON [P...]`: the share of routed picks `--expert-top-p P` keeps on `xtask gate --dump-ids` prompts.

use std::sync::atomic::Ordering::Relaxed;
use tf_dsv41::{Model, Options, TopP};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, ids, shares @ ..] = args.as_slice() else {
        eprintln!("usage: expert_top_p MODEL_DIR IDS_JSON [P...] (default 0.85)");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(ids).expect("reading IDS_JSON");
    let v: serde_json::Value = serde_json::from_str(&text).expect("IDS_JSON is JSON");
    let prompts: Vec<Vec<u32>> = v["prompts"]
        .as_array()
        .expect("a `prompts` list")
        .iter()
        .map(|p| p["ids"].as_array().expect("ids").iter().map(|t| t.as_u64().expect("an id") as u32).collect())
        .collect();
    let shares: Vec<f32> = match shares {
        [] => vec![0.85],
        s => s.iter().map(|p| p.parse().expect("P is a number")).collect(),
    };
    for p in shares {
        let opts = Options { expert_top_p: Some(TopP::new(p).expect("P in (0, 1]")), ..Options::default() };
        let model = Model::load(std::path::Path::new(dir), opts).expect("loading the model");
        let tokens: usize = prompts.iter().map(Vec::len).sum();
        for ids in &prompts {
            model.prefill(&mut model.new_state(), ids, true).expect("prefill");
        }
        let (routed, kept) = model
            .blocks
            .iter()
            .fold((0, 0), |(r, k), b| (r + b.ffn.picks.routed.load(Relaxed), k + b.ffn.picks.kept.load(Relaxed)));
        let share = kept as f64 / routed as f64;
        println!(
            "{}",
            serde_json::json!({"p": p, "tokens": tokens, "routed_picks": routed, "kept_picks": kept, "kept_share": share})
        );
    }
}
