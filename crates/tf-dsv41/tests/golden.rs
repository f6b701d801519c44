//! Golden logits from DeepSeek's own reference (tools/golden) on the tiny checkpoint, teacher-forced row by row.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::Path;
use tf_dsv41::attn::Quirks;
use tf_dsv41::tiny::{TinyKind, write_checkpoint};
use tf_dsv41::{Model, Options};

/// Row statistics of ours against the reference.
struct RowCmp {
    prompt: usize,
    row: usize,
    max_abs: f32,
    ours: u32,
    theirs: u32,
    ours5: Vec<u32>,
    theirs5: Vec<u32>,
    reference: Vec<f32>,
}

fn fixture(name: &str) -> (Value, Vec<f32>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap()).unwrap();
    let raw = std::fs::read(dir.join(format!("{name}.f32"))).unwrap();
    (json, raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}

fn top5(v: &[f32]) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..v.len() as u32).collect();
    idx.sort_by(|&a, &b| v[b as usize].total_cmp(&v[a as usize]).then(a.cmp(&b)));
    idx.truncate(5);
    idx
}

/// Runs every prompt of a fixture, feeding the reference's greedy tokens, and compares each row.
fn compare(name: &str, quirks: Quirks, earlier: bool, dir: &Path) -> Vec<RowCmp> {
    let (json, logits) = fixture(name);
    let vocab = json["logits"]["shape"][1].as_u64().unwrap() as usize;
    let model = Model::load(
        dir,
        Options { replay: false, quirks, sequential_sums: earlier, sequential_wo_a: earlier, ..Options::default() },
    )
    .unwrap();
    let mut out = Vec::new();
    for (pi, p) in json["prompts"].as_array().unwrap().iter().enumerate() {
        let ids: Vec<u32> = p["prompt"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let greedy: Vec<u32> =
            p["greedy_tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let off = p["logits_row_offset"].as_u64().unwrap() as usize;
        let mut st = model.new_state();
        let mut ours = vec![model.prefill(&mut st, &ids, true).unwrap().unwrap()];
        for &t in &greedy[..greedy.len() - 1] {
            ours.push(model.decode(&mut st, &[t]).unwrap().remove(0));
        }
        for (i, row) in ours.into_iter().enumerate() {
            let theirs = &logits[(off + i) * vocab..(off + i + 1) * vocab];
            let max_abs = row.iter().zip(theirs).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            let (ours, theirs_max, ours5, theirs5) = (argmax(&row), argmax(theirs), top5(&row), top5(theirs));
            out.push(RowCmp {
                prompt: pi,
                row: i,
                max_abs,
                ours,
                theirs: theirs_max,
                ours5,
                theirs5,
                reference: theirs.to_vec(),
            });
        }
    }
    out
}

/// Largest per-row |Δlogit| we accept: the reference itself moves rows by up to 1.71 when only its f32 summation order changes (tools/golden/README.md §6).
const TOL: f32 = 2.0;

fn check_checkpoint(json: &Value, dir: &Path) {
    for (file, want) in json["checkpoint"]["sha256"].as_object().unwrap() {
        let have: String =
            Sha256::digest(std::fs::read(dir.join(file)).unwrap()).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(&have, want.as_str().unwrap(), "{file} differs from the checkpoint the figures came from");
    }
}

/// The gate's statistics asserted; every row where our greedy token differs from the reference's (prompt, row, ours, theirs, each in the other's top 5), and the (prompt, row) of those over TOL/2 below the reference's best.
fn variant_rows(name: &str, stale: bool, earlier: bool) -> (Vec<Diverged>, Vec<(usize, usize)>) {
    let d = tempfile::tempdir().unwrap();
    write_checkpoint(TinyKind::Tiny, 0, d.path()).unwrap();
    check_checkpoint(&fixture(name).0, d.path());
    let rows = compare(name, Quirks { stale_index_keys: stale }, earlier, d.path());
    let mut sorted: Vec<f32> = rows.iter().map(|r| r.max_abs).collect();
    sorted.sort_by(f32::total_cmp);
    let (median, p90, worst) = (sorted[sorted.len() / 2], sorted[sorted.len() * 9 / 10], sorted[sorted.len() - 1]);
    eprintln!("{name} (earlier orders {earlier}): {} rows, max|Δ| median {median} p90 {p90} worst {worst}", rows.len());
    assert!(worst <= TOL && median <= 0.5 && p90 <= 1.0, "{name}: median {median} p90 {p90} worst {worst}");
    let (mut diverged, mut far) = (Vec::new(), Vec::new());
    for c in rows.iter().filter(|c| c.ours != c.theirs) {
        let gap = c.reference[c.theirs as usize] - c.reference[c.ours as usize];
        if gap > TOL / 2.0 {
            far.push((c.prompt, c.row));
        }
        let top5 = c.ours5.contains(&c.theirs) && c.theirs5.contains(&c.ours);
        diverged.push((c.prompt, c.row, c.ours, c.theirs, top5));
    }
    eprintln!("{name} diverged: {diverged:?}; over {} below the best: {far:?}", TOL / 2.0);
    (diverged, far)
}

/// The default (32-lane sums, 8-lane `wo_a`): statistics within the reference's own reorder noise; one row of this random model flips a near tie by 1.0–2.0 (listed), none by more than TOL.
#[test]
fn golden_owner_keys_variant() {
    let (diverged, far) = variant_rows("tiny_seed0_owner_keys", false, false);
    assert_eq!((diverged.as_slice(), far.as_slice()), (OWNER_KEYS_NEAR_TIES, &[(3, 35)][..]));
}

#[test]
fn golden_reference_variant_with_the_stale_key_quirk() {
    let (diverged, far) = variant_rows("tiny_seed0_reference", true, false);
    assert_eq!((diverged.as_slice(), far.as_slice()), (REFERENCE_NEAR_TIES, &[][..]));
}

/// The earlier contract (`--sequential-sums --sequential-wo-a`): the same statistics, every flipped token within TOL/2 of the reference's best.
#[test]
fn golden_with_the_earlier_sequential_orders() {
    for (name, stale, want) in [
        ("tiny_seed0_owner_keys", false, SEQUENTIAL_OWNER_KEYS_NEAR_TIES),
        ("tiny_seed0_reference", true, SEQUENTIAL_REFERENCE_NEAR_TIES),
    ] {
        let (diverged, far) = variant_rows(name, stale, true);
        assert_eq!((diverged.as_slice(), far.as_slice()), (want, &[][..]), "{name}");
    }
}

type Diverged = (usize, usize, u32, u32, bool);

const SEQUENTIAL_OWNER_KEYS_NEAR_TIES: &[Diverged] = &[
    (0, 33, 503, 82, true),
    (1, 3, 82, 253, true),
    (1, 13, 197, 325, true),
    (1, 20, 24, 32, true),
    (1, 21, 242, 32, true),
    (1, 22, 152, 162, true),
    (1, 23, 371, 55, true),
    (1, 33, 55, 454, true),
    (1, 38, 454, 55, true),
    (2, 2, 141, 184, true),
    (2, 3, 251, 184, true),
    (2, 14, 159, 468, true),
    (2, 18, 434, 478, true),
    (2, 20, 434, 60, true),
    (2, 28, 323, 127, true),
    (2, 32, 248, 127, true),
    (2, 34, 335, 248, false),
    (2, 39, 435, 248, true),
    (3, 0, 294, 38, true),
    (3, 1, 448, 140, true),
    (3, 14, 461, 86, true),
    (3, 16, 461, 505, false),
    (3, 17, 229, 505, true),
    (3, 19, 511, 461, true),
    (3, 20, 22, 461, true),
    (3, 21, 22, 461, true),
    (3, 22, 22, 353, true),
    (3, 23, 353, 170, true),
    (3, 25, 22, 392, false),
    (3, 26, 392, 22, true),
    (3, 27, 46, 22, true),
    (3, 28, 502, 479, true),
    (3, 30, 46, 502, true),
    (3, 32, 162, 272, true),
    (3, 35, 363, 244, true),
    (3, 36, 508, 363, true),
    (3, 37, 98, 508, true),
    (3, 39, 508, 1, true),
    (4, 4, 41, 495, true),
    (4, 5, 41, 495, true),
    (4, 9, 210, 291, true),
    (4, 11, 301, 440, true),
    (4, 20, 495, 159, true),
    (4, 24, 167, 368, true),
    (4, 35, 114, 204, true),
    (4, 36, 84, 204, true),
    (4, 37, 281, 317, true),
    (4, 39, 84, 428, true),
];
const SEQUENTIAL_REFERENCE_NEAR_TIES: &[Diverged] = &[
    (0, 23, 436, 503, true),
    (0, 24, 503, 436, true),
    (0, 28, 503, 387, true),
    (0, 35, 124, 503, true),
    (0, 36, 503, 124, true),
    (1, 8, 242, 197, true),
    (1, 10, 394, 242, true),
    (1, 11, 258, 394, false),
    (1, 13, 24, 197, false),
    (1, 16, 214, 242, true),
    (1, 17, 182, 32, true),
    (1, 18, 211, 32, true),
    (1, 19, 182, 191, true),
    (1, 21, 372, 136, true),
    (1, 22, 28, 197, false),
    (1, 23, 372, 55, true),
    (1, 24, 55, 214, true),
    (1, 25, 256, 55, true),
    (1, 40, 100, 330, true),
    (2, 2, 251, 141, false),
    (2, 11, 506, 46, true),
    (2, 21, 86, 60, true),
    (2, 22, 60, 448, true),
    (2, 24, 448, 248, true),
    (2, 25, 60, 448, true),
    (2, 26, 182, 60, true),
    (2, 28, 182, 448, true),
    (3, 0, 294, 38, true),
    (3, 1, 448, 140, true),
    (3, 2, 12, 38, true),
    (3, 3, 499, 38, true),
    (3, 10, 312, 300, true),
    (3, 14, 450, 505, true),
    (3, 16, 71, 450, true),
    (3, 21, 466, 71, false),
    (3, 26, 71, 162, false),
    (3, 37, 65, 55, false),
    (3, 40, 506, 55, true),
    (4, 1, 412, 33, true),
    (4, 5, 435, 41, true),
    (4, 6, 41, 233, true),
    (4, 8, 397, 291, true),
    (4, 11, 440, 435, true),
    (4, 12, 440, 311, true),
    (4, 18, 301, 435, true),
    (4, 22, 495, 311, true),
    (4, 24, 137, 144, true),
    (4, 25, 412, 435, true),
    (4, 27, 409, 340, false),
    (4, 30, 448, 409, true),
    (4, 33, 409, 340, false),
    (4, 36, 23, 409, false),
    (4, 37, 13, 204, true),
    (4, 39, 428, 13, true),
];

const OWNER_KEYS_NEAR_TIES: &[Diverged] = &[
    (0, 36, 503, 124, true),
    (0, 37, 503, 124, true),
    (1, 2, 253, 256, true),
    (1, 3, 82, 253, true),
    (1, 13, 197, 325, true),
    (1, 20, 24, 32, true),
    (1, 22, 407, 162, false),
    (1, 23, 371, 55, true),
    (1, 33, 55, 454, true),
    (2, 2, 251, 184, true),
    (2, 5, 228, 184, true),
    (2, 14, 159, 468, true),
    (2, 19, 478, 458, true),
    (2, 20, 478, 60, true),
    (2, 28, 323, 127, true),
    (2, 32, 248, 127, true),
    (2, 39, 435, 248, true),
    (3, 4, 12, 38, true),
    (3, 8, 312, 38, true),
    (3, 9, 38, 312, true),
    (3, 13, 300, 461, true),
    (3, 14, 505, 86, true),
    (3, 20, 22, 461, true),
    (3, 22, 22, 353, true),
    (3, 23, 46, 170, true),
    (3, 24, 461, 46, true),
    (3, 25, 195, 392, true),
    (3, 26, 392, 22, true),
    (3, 27, 46, 22, true),
    (3, 28, 502, 479, true),
    (3, 29, 143, 162, true),
    (3, 30, 46, 502, true),
    (3, 32, 162, 272, true),
    (3, 34, 162, 143, true),
    (3, 35, 162, 244, false),
    (3, 36, 508, 363, true),
    (4, 0, 33, 41, true),
    (4, 1, 33, 41, true),
    (4, 9, 412, 291, false),
    (4, 11, 435, 440, true),
    (4, 20, 435, 159, true),
    (4, 35, 114, 204, true),
    (4, 36, 161, 204, true),
    (4, 37, 281, 317, false),
    (4, 39, 84, 428, true),
];

const REFERENCE_NEAR_TIES: &[Diverged] = &[
    (0, 35, 124, 503, true),
    (0, 36, 503, 124, true),
    (0, 37, 503, 124, true),
    (1, 8, 242, 197, true),
    (1, 10, 394, 242, true),
    (1, 11, 30, 394, false),
    (1, 13, 394, 197, true),
    (1, 14, 24, 211, false),
    (1, 15, 182, 303, true),
    (1, 16, 214, 242, true),
    (1, 18, 242, 32, false),
    (1, 19, 182, 191, true),
    (1, 22, 407, 197, false),
    (1, 24, 55, 214, true),
    (1, 40, 100, 330, true),
    (2, 2, 251, 141, true),
    (2, 11, 506, 46, true),
    (2, 20, 248, 60, true),
    (2, 23, 448, 86, true),
    (2, 26, 182, 60, true),
    (2, 28, 182, 448, true),
    (2, 39, 182, 449, true),
    (3, 13, 461, 505, true),
    (3, 21, 466, 71, true),
    (3, 24, 71, 347, true),
    (3, 28, 162, 252, true),
    (3, 29, 471, 162, false),
    (3, 34, 252, 55, false),
    (3, 35, 198, 471, true),
    (3, 37, 471, 55, true),
    (3, 40, 506, 55, true),
    (4, 0, 33, 41, true),
    (4, 1, 60, 33, true),
    (4, 2, 33, 41, true),
    (4, 5, 60, 41, false),
    (4, 6, 41, 233, true),
    (4, 8, 397, 291, true),
    (4, 9, 435, 440, true),
    (4, 12, 440, 311, true),
    (4, 21, 159, 144, false),
    (4, 22, 495, 311, true),
    (4, 24, 137, 144, true),
    (4, 26, 137, 409, true),
    (4, 27, 409, 340, true),
    (4, 35, 281, 382, true),
];
