//! Our exact CPU path against DeepSeek's reference on the shipped gate model (tools/golden/run_reference.py --top 64), within the gate's noise floor.

use serde_json::Value;
use std::path::Path;
use tf_dsv41::attn::Quirks;
use tf_dsv41::gate_model::{Manifest, gate_model_assets, resolve};
use tf_dsv41::{Model, Options};

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

fn lse(row: &[f32]) -> f64 {
    let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln()
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}

/// KL(reference ‖ ours) over the reference's top-k ids plus one bucket for the rest: a lower bound of the full KL.
fn topk_kl(step: &Value, ours: &[f32]) -> f64 {
    let (lse_ref, lse_ours) = (step["lse"].as_f64().unwrap(), lse(ours));
    let (mut kl, mut p_in, mut q_in) = (0.0, 0.0, 0.0);
    for pair in step["topk"].as_array().unwrap() {
        let (id, v) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap());
        let (lp, lq) = (v - lse_ref, ours[id] as f64 - lse_ours);
        kl += lp.exp() * (lp - lq);
        p_in += lp.exp();
        q_in += lq.exp();
    }
    let (p_out, q_out) = ((1.0 - p_in).max(0.0), (1.0 - q_in).max(1e-300));
    if p_out > 0.0 { kl + p_out * (p_out.ln() - q_out.ln()) } else { kl }
}

#[test]
fn exact_path_is_within_the_noise_floor_of_deepseeks_reference() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fx = json(&root.join("tests/fixtures/golden/gate_model_owner_keys.json"));
    let assets = gate_model_assets();
    let manifest = Manifest::read(&assets).unwrap();
    let shard = &fx["checkpoint"]["sha256"]["model-00001-of-00001.safetensors"];
    assert_eq!(
        shard.as_str(),
        Some(manifest.expanded_sha256.as_str()),
        "the golden is of another gate model: rerun it"
    );
    let th = json(&root.join("../../assets/gate/thresholds.json"));
    assert_eq!(th["gate_model"].as_str(), Some(manifest.expanded_sha256.as_str()), "thresholds not declared for it");
    let (max_kl, min_agree) = (th["max_kl_mean"].as_f64().unwrap(), th["min_greedy_agreement"].as_f64().unwrap());

    let dir = resolve(&assets).unwrap();
    let quirks = Quirks { stale_index_keys: false };
    let model = Model::load(&dir, Options { replay: false, quirks, ..Options::default() }).unwrap();
    let (mut rows, mut agree, mut kl_sum, mut kl_max) = (0usize, 0usize, 0.0f64, 0.0f64);
    for p in fx["prompts"].as_array().unwrap() {
        let ids: Vec<u32> = p["prompt"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let greedy: Vec<u32> =
            p["greedy_tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let mut st = model.new_state();
        let mut ours = vec![model.prefill(&mut st, &ids, true).unwrap().unwrap()];
        // Teacher-forced on the reference's greedy tokens, so one flip does not move every later row.
        for &t in &greedy[..greedy.len() - 1] {
            ours.push(model.decode(&mut st, &[t]).unwrap().remove(0));
        }
        for (row, step) in ours.iter().zip(p["steps"].as_array().unwrap()) {
            let kl = topk_kl(step, row);
            rows += 1;
            agree += usize::from(argmax(row) as u64 == step["argmax"].as_u64().unwrap());
            kl_sum += kl;
            kl_max = kl_max.max(kl);
        }
    }
    let (agreement, kl_mean) = (agree as f64 / rows as f64, kl_sum / rows as f64);
    eprintln!(
        "gate golden: {rows} rows, greedy agreement {agreement:.4}, top-k KL mean {kl_mean:.3e} max {kl_max:.3e}"
    );
    assert!(rows >= 80, "{rows} rows: the fixture lost its prompts");
    assert!(agreement >= min_agree, "greedy agreement {agreement:.4} < the noise floor's {min_agree}");
    assert!(kl_mean <= max_kl, "top-k KL mean {kl_mean:.3e} > the noise floor's {max_kl:.3e}");
}
