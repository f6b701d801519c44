//! The tiny model end to end: chunked prefill equals one-shot bit for bit, decode rows equal prompt rows.

use std::path::Path;
use std::sync::OnceLock;
use tf_dsv41::tiny::{TinyKind, write_checkpoint};
use tf_dsv41::{Model, Options};

fn tiny_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        write_checkpoint(TinyKind::Tiny, 0, d.path()).unwrap();
        d
    })
    .path()
}

fn model(replay: bool) -> Model {
    Model::load(tiny_dir(), Options { replay, ..Options::default() }).unwrap()
}

fn prompt(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 131 + 7) % 509 + 3).collect()
}

fn prefill_chunked(m: &Model, tokens: &[u32], chunk: usize) -> Vec<f32> {
    let mut st = m.new_state();
    let mut out = None;
    for (i, c) in tokens.chunks(chunk).enumerate() {
        out = m.prefill(&mut st, c, (i + 1) * chunk >= tokens.len()).unwrap();
    }
    out.unwrap()
}

#[test]
fn chunked_prefill_equals_one_shot() {
    let p = prompt(70);
    for replay in [false, true] {
        let m = model(replay);
        let whole = prefill_chunked(&m, &p, p.len());
        assert!(whole.iter().all(|v| v.is_finite()));
        let spread = whole.iter().copied().fold(f32::MIN, f32::max) - whole.iter().copied().fold(f32::MAX, f32::min);
        assert!(spread > 0.1, "logits are not degenerate (spread {spread})");
        for chunk in [1, 7, 64] {
            assert_eq!(prefill_chunked(&m, &p, chunk), whole, "replay {replay}, chunk {chunk}");
        }
    }
}

#[test]
fn decode_row_equals_prompt_row_without_replay() {
    let m = model(false);
    let p = prompt(45);
    let mut st = m.new_state();
    m.prefill(&mut st, &p[..40], true).unwrap();
    let mut last = Vec::new();
    for &t in &p[40..] {
        last = m.decode(&mut st, &[t]).unwrap().remove(0);
    }
    assert_eq!(last, prefill_chunked(&m, &p, 45));
    let mut st = m.new_state();
    m.prefill(&mut st, &p[..40], true).unwrap();
    let rows = m.decode(&mut st, &p[40..]).unwrap();
    assert_eq!(rows.last().unwrap(), &last, "a 5-row verify window equals 5 single decode steps");
}

#[test]
fn replay_changes_only_the_decoder_and_stays_close() {
    let p = prompt(60);
    let exact = prefill_chunked(&model(false), &p, 60);
    let replayed = prefill_chunked(&model(true), &p, 60);
    assert_ne!(exact, replayed, "the decoder saw fewer rows");
    let short = prompt(12);
    assert_eq!(
        prefill_chunked(&model(false), &short, 12),
        prefill_chunked(&model(true), &short, 12),
        "prompts within the window are exact"
    );
}

#[test]
fn dspark_drafts_are_deterministic_and_follow_the_ring() {
    let m = model(true);
    let p = prompt(50);
    let mut st = m.new_state();
    let logits = m.prefill(&mut st, &p, true).unwrap().unwrap();
    let next = logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u32;
    m.decode(&mut st, &[next]).unwrap();
    let d = m.draft(&mut st, 17).unwrap();
    assert_eq!(d.tokens.len(), 5);
    assert_eq!(d.confidence.len(), 5);
    assert!(d.tokens.iter().all(|&t| (t as usize) < m.cfg.vocab_size) && d.confidence.iter().all(|c| c.is_finite()));
    assert_eq!(m.draft(&mut st, 17).unwrap(), d, "drafting reads the state and leaves it unchanged");
    assert_ne!(m.draft(&mut st, 18).unwrap().confidence, d.confidence, "the first draft input matters");
    let mut other = m.new_state();
    m.prefill(&mut other, &prompt(50)[..49], true).unwrap();
    m.decode(&mut other, &[p[49]]).unwrap();
    m.decode(&mut other, &[next]).unwrap();
    assert_ne!(
        m.draft(&mut other, 17).unwrap().confidence,
        d.confidence,
        "the ring holds the main rows it was seeded with"
    );
}

#[test]
fn stale_index_key_quirk_is_a_switch_that_only_moves_open_group_decode_steps() {
    let p = prompt(40);
    let run = |stale: bool| {
        let opts =
            Options { replay: false, quirks: tf_dsv41::attn::Quirks { stale_index_keys: stale }, ..Options::default() };
        let m = Model::load(tiny_dir(), opts).unwrap();
        let mut st = m.new_state();
        let first = m.prefill(&mut st, &p, true).unwrap().unwrap();
        let open = m.decode(&mut st, &[5]).unwrap().remove(0);
        (first, open)
    };
    let (fixed, quirk) = (run(false), run(true));
    assert_eq!(fixed.0, quirk.0, "prefill publishes every owner's keys");
    assert_ne!(fixed.1, quirk.1, "position 40 leaves a ratio-2 group open: the reference scores layer 4's keys");
}

#[test]
fn small_model_with_the_real_vocab_loads_and_runs() {
    let d = tempfile::tempdir().unwrap();
    write_checkpoint(TinyKind::Small, 0, d.path()).unwrap();
    let m = Model::load(d.path(), Options::default()).unwrap();
    assert_eq!(m.cfg.vocab_size, 129_280);
    let mut st = m.new_state();
    let logits = m.prefill(&mut st, &[0, 100, 2000, 30000, 5], true).unwrap().unwrap();
    assert_eq!(logits.len(), 129_280);
    assert!(m.decode(&mut st, &[129_279]).is_ok());
    assert!(
        m.decode(&mut st, &[129_280]).unwrap_err().to_string().contains("129280"),
        "an id past the vocabulary is refused"
    );
}

#[test]
fn expert_top_p_keeps_chunking_invariance_and_changes_the_logits() {
    let p = prompt(70);
    let top_p = Some(tf_dsv41::TopP::new(0.5).unwrap());
    let m = Model::load(tiny_dir(), Options { replay: false, expert_top_p: top_p, ..Options::default() }).unwrap();
    let whole = prefill_chunked(&m, &p, p.len());
    for chunk in [1, 7, 64] {
        assert_eq!(prefill_chunked(&m, &p, chunk), whole, "chunk {chunk}: pruning is per row, so any chunking agrees");
    }
    assert_ne!(whole, prefill_chunked(&model(false), &p, p.len()), "a share of 0.5 keeps only the heavier of top-2");
    let all = Some(tf_dsv41::TopP::new(1.0).unwrap());
    let keep = Model::load(tiny_dir(), Options { replay: false, expert_top_p: all, ..Options::default() }).unwrap();
    assert_eq!(
        prefill_chunked(&keep, &p, p.len()),
        prefill_chunked(&model(false), &p, p.len()),
        "a share of 1 keeps every expert"
    );
    assert!(
        tf_dsv41::TopP::new(0.0).is_err()
            && tf_dsv41::TopP::new(1.5).is_err()
            && tf_dsv41::TopP::new(f32::NAN).is_err()
    );
}

#[test]
fn sequential_wo_a_keeps_chunking_and_decode_invariance() {
    let p = prompt(70);
    let m = Model::load(tiny_dir(), Options { replay: false, sequential_wo_a: true, ..Options::default() }).unwrap();
    let whole = prefill_chunked(&m, &p, p.len());
    for chunk in [1, 7, 64] {
        assert_eq!(prefill_chunked(&m, &p, chunk), whole, "chunk {chunk}: each row's dots are its own");
    }
    let mut st = m.new_state();
    m.prefill(&mut st, &p[..60], true).unwrap();
    let mut last = Vec::new();
    for &t in &p[60..] {
        last = m.decode(&mut st, &[t]).unwrap().remove(0);
    }
    assert_eq!(last, whole, "decode rows equal prompt rows");
    let base = prefill_chunked(&model(false), &p, p.len());
    let moved = whole.iter().zip(&base).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(moved < 0.5, "the order moves a logit by {moved}: at most a few bf16 roundings of wo_a's outputs");
}

#[test]
fn grouped_wo_a_sums_in_the_order_asked() {
    use tf_core::bf16;
    // 2^24 absorbs each 1 that follows it in index order; in 8 lanes the ±2^24 meet in lane 0 and the ones survive.
    let big = 16_777_216.0f32;
    let o: Vec<bf16> = (0..16)
        .map(|i| {
            bf16::from_f32(if i == 0 {
                big
            } else if i == 8 {
                -big
            } else {
                1.0
            })
        })
        .collect();
    let w = vec![1.0f32; 16];
    let at = |lanes8| tf_dsv41::attn::grouped_wo_a(&o, &w, (1, 1, 1, 16), lanes8)[0].to_f32();
    assert_eq!((at(false), at(true)), (7.0, 14.0));
    let two = [o.clone(), o.iter().map(|v| -*v).collect()].concat();
    let u = tf_dsv41::attn::grouped_wo_a(&two, &[w.clone(), w].concat(), (1, 2, 1, 16), true);
    assert_eq!((u[0].to_f32(), u[1].to_f32()), (14.0, -14.0), "each group its own dots");
}
