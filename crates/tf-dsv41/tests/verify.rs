//! Verify windows and rewinds (issue 26): every kept row, and the state after, equal plain decode bit for bit.

mod common;

use common::{argmax, dir};
use tf_dsv41::tiny::TinyKind;
use tf_dsv41::{Model, Options};

/// Greedy plain decode: each step's logits and the token it picks, `steps` steps after the prompt.
fn plain(m: &Model, prompt: &[u32], steps: usize) -> (Vec<Vec<f32>>, Vec<u32>) {
    let mut st = m.new_state();
    let mut row = m.prefill(&mut st, prompt, true).unwrap().unwrap();
    let (mut rows, mut toks) = (vec![row.clone()], vec![argmax(&row)]);
    for _ in 0..steps {
        row = m.decode(&mut st, &[*toks.last().unwrap()]).unwrap().remove(0);
        toks.push(argmax(&row));
        rows.push(row);
    }
    (rows, toks)
}

/// A cheap deterministic stream of choices for the draft shapes.
fn lcg(s: &mut u64) -> u64 {
    *s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *s >> 33
}

/// Drafted greedy decode: windows of 1-6 rows whose drafts are right for a random prefix, then wrong; returns the emitted rows.
fn drafted(m: &Model, prompt: &[u32], truth: &[u32], steps: usize, seed: u64) -> (Vec<Vec<f32>>, usize) {
    let (vocab, mut s) = (m.cfg.vocab_size as u32, seed);
    let mut st = m.new_state();
    let first = m.prefill(&mut st, prompt, true).unwrap().unwrap();
    let (mut rows, mut toks, mut rewinds) = (vec![first.clone()], vec![argmax(&first)], 0);
    while rows.len() <= steps {
        let n = toks.len();
        let k = (lcg(&mut s) % 6) as usize;
        let good = (lcg(&mut s) % 7) as usize;
        let mut window = vec![toks[n - 1]];
        for i in 0..k {
            let right = truth.get(n + i).copied().unwrap_or(0);
            window.push(if i < good { right } else { (right + 1 + (lcg(&mut s) as u32 % (vocab - 1))) % vocab });
        }
        let out = m.verify(&mut st, &window).unwrap();
        let mut keep = 0;
        for (r, row) in out.iter().enumerate() {
            keep += 1;
            let t = argmax(row);
            rows.push(row.clone());
            toks.push(t);
            if window.get(r + 1) != Some(&t) {
                break;
            }
        }
        if keep < window.len() {
            rewinds += 1;
        }
        m.rewind(&mut st, keep).unwrap();
        assert_eq!(st.pos, prompt.len() + toks.len() - 1, "the lane holds the emitted tokens but the last");
    }
    rows.truncate(steps + 1);
    (rows, rewinds)
}

fn check(kind: TinyKind, replay: bool, lens: &[usize], steps: usize) {
    let m = Model::load(dir(kind), Options { replay, ..Options::default() }).unwrap();
    let vocab = m.cfg.vocab_size as u32;
    for (i, &len) in lens.iter().enumerate() {
        let prompt: Vec<u32> = (0..len as u32).map(|j| (j * 131 + 7 + i as u32) % (vocab - 3) + 3).collect();
        let (want, truth) = plain(&m, &prompt, steps);
        let (got, rewinds) = drafted(&m, &prompt, &truth, steps, len as u64);
        assert!(rewinds > 2, "{kind:?} prompt {len}: only {rewinds} windows were cut back");
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w, "{kind:?} replay {replay} prompt {len}: row {j} differs from plain decode");
        }
    }
}

#[test]
fn tiny_verify_windows_and_rewinds_equal_plain_decode() {
    check(TinyKind::Tiny, true, &[1, 6, 31, 64, 137], 40);
    check(TinyKind::Tiny, false, &[9, 70], 40);
}

#[test]
fn small_verify_windows_and_rewinds_equal_plain_decode() {
    check(TinyKind::Small, true, &[5, 40], 48);
}

#[test]
fn drafts_after_a_rewind_equal_drafts_after_plain_decode() {
    let m = Model::load(dir(TinyKind::Tiny), Options::default()).unwrap();
    let prompt: Vec<u32> = (0..23u32).map(|j| (j * 37 + 11) % 500 + 3).collect();
    let (_, truth) = plain(&m, &prompt, 12);
    let mut a = m.new_state();
    m.prefill(&mut a, &prompt, true).unwrap();
    let mut b = a.clone();
    m.verify(&mut a, &[truth[0], truth[1], 7, 8, 9]).unwrap();
    m.rewind(&mut a, 2).unwrap();
    m.decode(&mut b, &[truth[0]]).unwrap();
    m.decode(&mut b, &[truth[1]]).unwrap();
    assert_eq!(m.draft(&mut a, truth[2]).unwrap(), m.draft(&mut b, truth[2]).unwrap());
    assert_eq!(a.pos, b.pos);
}

#[test]
fn a_rewind_needs_a_window_and_keeps_at_most_its_rows() {
    let m = Model::load(dir(TinyKind::Tiny), Options::default()).unwrap();
    let mut st = m.new_state();
    m.prefill(&mut st, &[5, 6, 7], true).unwrap();
    assert!(m.rewind(&mut st, 1).unwrap_err().to_string().contains("without a verify window"));
    m.verify(&mut st, &[8, 9]).unwrap();
    assert!(m.rewind(&mut st, 3).unwrap_err().to_string().contains("keeps 3 of a 2-row window"));
    m.verify(&mut st, &[8, 9]).unwrap();
    m.decode(&mut st, &[10]).unwrap();
    assert!(m.rewind(&mut st, 1).is_err(), "a plain decode ends the window");
    let wide = vec![5u32; m.cfg.window_size + 1];
    assert!(m.verify(&mut st, &wide).unwrap_err().to_string().contains("wider than the window"));
}
