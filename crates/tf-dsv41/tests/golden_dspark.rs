//! DSpark drafts against DeepSeek's reference `forward_spec` (tools/golden `--dspark`) on the tiny checkpoint.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::Path;
use tf_dsv41::attn::Quirks;
use tf_dsv41::tiny::{TinyKind, write_checkpoint};
use tf_dsv41::{Model, Options};

const NAME: &str = "tiny_seed0_dspark";

fn fixture(name: &str) -> (Value, Vec<f32>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap()).unwrap();
    let raw = std::fs::read(dir.join(format!("{name}.f32"))).unwrap();
    (json, raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn check_checkpoint(json: &Value, dir: &Path) {
    for (file, want) in json["checkpoint"]["sha256"].as_object().unwrap() {
        let have: String =
            Sha256::digest(std::fs::read(dir.join(file)).unwrap()).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(&have, want.as_str().unwrap(), "{file} differs from the checkpoint the figures came from");
    }
}

/// One compared draft row: where it is, its max |Δlogit|, |Δconfidence|, and both greedy tokens.
struct RowCmp {
    prompt: usize,
    step: usize,
    row: usize,
    max_abs: f32,
    conf_delta: f32,
    ours: u32,
    theirs: u32,
    gap: f32,
}

/// Teacher-forces each prompt's main tokens, drafts after every recorded step, compares rows whose inputs agree.
fn compare(dir: &Path) -> (Vec<RowCmp>, usize) {
    let (json, logits) = fixture(NAME);
    let vocab = json["draft_logits"]["shape"][1].as_u64().unwrap() as usize;
    let (main, _) = fixture("tiny_seed0_owner_keys");
    let model =
        Model::load(dir, Options { replay: false, quirks: Quirks { stale_index_keys: false }, ..Options::default() })
            .unwrap();
    let (mut out, mut skipped) = (Vec::new(), 0);
    for (pi, p) in json["prompts"].as_array().unwrap().iter().enumerate() {
        let prompt = ids(&p["prompt"]);
        let greedy = ids(&p["greedy_tokens"]);
        let main_rec = main["prompts"].as_array().unwrap().iter().find(|m| ids(&m["prompt"]) == prompt).unwrap();
        assert_eq!(greedy, ids(&main_rec["greedy_tokens"])[..greedy.len()], "main tokens differ from the main fixture");
        let off = p["draft_logits_row_offset"].as_u64().unwrap() as usize;
        let mut st = model.new_state();
        model.prefill(&mut st, &prompt, true).unwrap();
        for (k, s) in p["steps"].as_array().unwrap().iter().enumerate() {
            let step = s["step"].as_u64().unwrap() as usize;
            assert_eq!(s["start_pos"].as_u64().unwrap() as usize, prompt.len() + step - 1);
            model.decode(&mut st, &[greedy[step - 1]]).unwrap();
            let next = s["next"].as_u64().unwrap() as u32;
            assert_eq!(next, greedy[step]);
            let (drafts, rows) = model.draft_with_logits(&mut st, next).unwrap();
            let (theirs, conf) = (ids(&s["drafts"]), floats(&s["confidence"]));
            assert_eq!(st.pos, prompt.len() + step, "draft must not advance the sequence");
            for (r, row) in rows.iter().enumerate() {
                if drafts.tokens[..r] != theirs[..r] {
                    skipped += 1;
                    continue;
                }
                let reference = &logits[(off + k * 5 + r) * vocab..(off + k * 5 + r + 1) * vocab];
                let max_abs = row.iter().zip(reference).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                let gap = reference[theirs[r] as usize] - reference[drafts.tokens[r] as usize];
                out.push(RowCmp {
                    prompt: pi,
                    step,
                    row: r,
                    max_abs,
                    conf_delta: drafts.confidence[r] - conf[r],
                    ours: drafts.tokens[r],
                    theirs: theirs[r],
                    gap,
                });
            }
        }
    }
    (out, skipped)
}

/// Per-row max |Δlogit| bound: ours measured median 0.21 / worst 0.31, the reference's own f64-sum twin 0.19 / 0.30.
const TOL: f32 = 0.75;
/// Per-row |Δconfidence| bound: ours median 0.13-0.15 / worst 0.88, the f64-sum twin 0.10 / 0.78 (un-normed input).
const CONF_TOL: f32 = 1.5;
/// Bound on the median of either figure over all compared rows (both measure ≤ 0.21 ours, ≤ 0.19 the twin).
const MEDIAN_TOL: f32 = 0.35;

fn stats(v: &mut [f32]) -> (f32, f32, f32) {
    v.sort_by(f32::total_cmp);
    (v[v.len() / 2], v[v.len() * 9 / 10], v[v.len() - 1])
}

type Diverged = (usize, usize, usize, u32, u32);

#[test]
fn golden_dspark_drafts() {
    let d = tempfile::tempdir().unwrap();
    write_checkpoint(TinyKind::Tiny, 0, d.path()).unwrap();
    check_checkpoint(&fixture(NAME).0, d.path());
    let (rows, skipped) = compare(d.path());
    for first in [true, false] {
        let sel: Vec<&RowCmp> = rows.iter().filter(|c| (c.row == 0) == first).collect();
        let (lm, lp, lw) = stats(&mut sel.iter().map(|c| c.max_abs).collect::<Vec<_>>());
        let (cm, cp, cw) = stats(&mut sel.iter().map(|c| c.conf_delta.abs()).collect::<Vec<_>>());
        let bias = sel.iter().map(|c| c.conf_delta).sum::<f32>() / sel.len() as f32;
        eprintln!("row0={first}: {} rows, max|Δlogit| median {lm} p90 {lp} worst {lw}", sel.len());
        eprintln!("row0={first}: |Δconf| median {cm} p90 {cp} worst {cw}, mean signed Δconf {bias}");
        assert!(lm <= MEDIAN_TOL && cm <= MEDIAN_TOL, "row0={first}: medians {lm} {cm}");
    }
    eprintln!("{skipped} later rows not compared (an earlier draft token differs)");
    for c in &rows {
        assert!(c.max_abs <= TOL, "prompt {} step {} row {}: max|Δlogit| {}", c.prompt, c.step, c.row, c.max_abs);
        assert!(
            c.conf_delta.abs() <= CONF_TOL,
            "prompt {} step {} row {}: Δconf {}",
            c.prompt,
            c.step,
            c.row,
            c.conf_delta
        );
        assert!(
            c.gap <= TOL / 2.0,
            "prompt {} step {} row {}: ours {} is {} below",
            c.prompt,
            c.step,
            c.row,
            c.ours,
            c.gap
        );
    }
    let diverged: Vec<Diverged> =
        rows.iter().filter(|c| c.ours != c.theirs).map(|c| (c.prompt, c.step, c.row, c.ours, c.theirs)).collect();
    eprintln!("diverged: {diverged:?}");
    assert_eq!(diverged, DIVERGED);
}

/// Rows (prompt, step, row, ours, theirs) whose greedy draft differs while every earlier draft of the block agrees (the default orders; the sequential ones gave six).
const DIVERGED: &[Diverged] = &[(1, 1, 3, 39, 390), (1, 12, 3, 390, 358), (1, 13, 1, 358, 344)];
