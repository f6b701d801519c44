//! Several lanes in one step (issue 24 item 2, issue 26 item 4): each lane's rows equal its decode alone, bit for bit.

mod common;

use common::{argmax, dir};
use tf_dsv41::state::SeqState;
use tf_dsv41::tiny::TinyKind;
use tf_dsv41::{Model, Options};
use tf_family::Family;

fn prompt(len: usize, salt: u32, vocab: u32) -> Vec<u32> {
    (0..len as u32).map(|j| (j * 131 + 7 + salt * 17) % (vocab - 3) + 3).collect()
}

/// Draft tokens, confidence bits, and the row the lane decodes after drafting.
type Drafted = (Vec<u32>, Vec<u32>, Vec<f32>);

/// One lane alone: greedy logits of its prompt's last row and `steps` decode rows, and its drafts after them.
fn alone(m: &Model, prompt: &[u32], steps: usize) -> (Vec<Vec<f32>>, Option<Drafted>) {
    let mut st = m.new_state();
    let mut rows = vec![m.prefill(&mut st, prompt, true).unwrap().unwrap()];
    for _ in 0..steps {
        let t = argmax(rows.last().unwrap());
        rows.push(m.decode(&mut st, &[t]).unwrap().remove(0));
    }
    let next = argmax(rows.last().unwrap());
    let drafts = m.dspark.as_ref().map(|_| {
        let d = m.draft(&mut st, next).unwrap();
        let after = m.decode(&mut st, &[next]).unwrap().remove(0);
        (d.tokens, d.confidence.iter().map(|c| c.to_bits()).collect(), after)
    });
    (rows, drafts)
}

/// Lanes whose prompts and lengths differ, decoded in shared steps while they last (the batch shrinks as lanes end).
fn check(kind: TinyKind, replay: bool, lens: &[usize], steps: &[usize]) {
    let m = Model::load(dir(kind), Options { replay, ..Options::default() }).unwrap();
    let vocab = m.cfg.vocab_size as u32;
    let prompts: Vec<Vec<u32>> = lens.iter().enumerate().map(|(i, &l)| prompt(l, i as u32, vocab)).collect();
    let mut states: Vec<SeqState> = prompts.iter().map(|_| m.new_state()).collect();
    let mut rows: Vec<Vec<Vec<f32>>> =
        prompts.iter().zip(&mut states).map(|(p, st)| vec![m.prefill(st, p, true).unwrap().unwrap()]).collect();
    for step in 0..*steps.iter().max().unwrap() {
        let live: Vec<usize> = (0..lens.len()).filter(|&i| step < steps[i]).collect();
        let tokens: Vec<[u32; 1]> = live.iter().map(|&i| [argmax(rows[i].last().unwrap())]).collect();
        let toks: Vec<&[u32]> = tokens.iter().map(|t| &t[..]).collect();
        let mut lanes: Vec<&mut SeqState> =
            states.iter_mut().enumerate().filter(|(i, _)| live.contains(i)).map(|(_, s)| s).collect();
        let out = m.decode_lanes(&mut lanes, &toks).unwrap();
        assert_eq!(out.len(), live.len());
        for (&i, mut r) in live.iter().zip(out) {
            assert_eq!(r.len(), 1, "one row per lane");
            rows[i].push(r.remove(0));
        }
    }
    // Every lane drafts in one call (the family's `draft_lanes`), then decodes its next token.
    let nexts: Vec<u32> = rows.iter().map(|r| argmax(r.last().unwrap())).collect();
    let mut lanes: Vec<&mut SeqState> = states.iter_mut().collect();
    let room = vec![5; nexts.len()];
    let drafted = Family::draft_lanes(&m, &mut lanes, &nexts, &room);
    for (i, p) in prompts.iter().enumerate() {
        let (want, drafts) = alone(&m, p, steps[i]);
        for (j, (g, w)) in rows[i].iter().zip(&want).enumerate() {
            assert!(
                g == w,
                "{kind:?} replay {replay} lane {i} (prompt {}): row {j} differs from the lane alone",
                p.len()
            );
        }
        assert_eq!(states[i].pos, p.len() + steps[i]);
        let got = drafted[i].as_ref().unwrap().as_ref().map(|d| {
            let after = m.decode(&mut states[i], &[nexts[i]]).unwrap().remove(0);
            (d.tokens.clone(), d.confidence.iter().map(|c| c.to_bits()).collect::<Vec<_>>(), after)
        });
        assert!(got == drafts, "{kind:?} lane {i}: drafts of lanes together, or the decode after, differ from alone");
    }
}

#[test]
fn tiny_lanes_in_one_step_equal_each_lane_alone() {
    check(TinyKind::Tiny, true, &[1, 9, 40, 137, 23], &[20, 7, 20, 13, 1]);
    check(TinyKind::Tiny, false, &[5, 70, 33], &[12, 12, 4]);
}

#[test]
fn small_lanes_in_one_step_equal_each_lane_alone() {
    check(TinyKind::Small, true, &[6, 45, 19, 80], &[14, 9, 14, 3]);
}

#[test]
fn verify_windows_of_several_lanes_in_one_step_equal_each_lane_alone() {
    let m = Model::load(dir(TinyKind::Tiny), Options::default()).unwrap();
    let vocab = m.cfg.vocab_size as u32;
    let prompts: Vec<Vec<u32>> =
        [17usize, 4, 52].iter().enumerate().map(|(i, &l)| prompt(l, i as u32, vocab)).collect();
    let windows: [&[u32]; 3] = [&[9, 10, 11, 12], &[40], &[7, 8, 300]];
    let keeps = [2usize, 1, 3];
    let fresh = |p: &[u32]| {
        let mut st = m.new_state();
        m.prefill(&mut st, p, true).unwrap();
        st
    };
    let mut together: Vec<SeqState> = prompts.iter().map(|p| fresh(p)).collect();
    let got = m.verify_lanes(&mut together.iter_mut().collect::<Vec<_>>(), &windows).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        let mut st = fresh(p);
        let want = m.verify(&mut st, windows[i]).unwrap();
        assert!(got[i] == want, "lane {i}: the window's rows differ from its window alone");
        m.rewind(&mut st, keeps[i]).unwrap();
        m.rewind(&mut together[i], keeps[i]).unwrap();
        let t = [argmax(&want[keeps[i] - 1])];
        let after = m.decode(&mut st, &t).unwrap();
        assert!(m.decode(&mut together[i], &t).unwrap() == after, "lane {i}: decode after the rewind differs");
        assert_eq!(together[i].pos, st.pos);
    }
}

#[test]
fn a_lane_that_cannot_decode_fails_alone_and_the_others_decode() {
    let m = Model::load(dir(TinyKind::Tiny), Options::default()).unwrap();
    let vocab = m.cfg.vocab_size as u32;
    let mut a = m.new_state();
    let mut bad = m.new_state();
    let mut c = m.new_state();
    let (pa, pc) = (prompt(12, 1, vocab), prompt(30, 2, vocab));
    let ra = m.prefill(&mut a, &pa, true).unwrap().unwrap();
    m.prefill(&mut bad, &pa, true).unwrap();
    let rc = m.prefill(&mut c, &pc, true).unwrap().unwrap();
    let (ta, tc) = (argmax(&ra), argmax(&rc));
    let (mut a1, mut c1) = (a.clone(), c.clone());
    let want = [m.decode(&mut a1, &[ta]).unwrap().remove(0), m.decode(&mut c1, &[tc]).unwrap().remove(0)];
    let rows: [&[u32]; 3] = [&[ta], &[vocab + 5], &[tc]];
    let out = Family::step_lanes(&m, &mut [&mut a, &mut bad, &mut c], &rows, &[false; 3], &mut [None, None, None]);
    let err = out[1].as_ref().unwrap_err().to_string();
    assert!(err.contains("outside the vocabulary"), "the bad lane's own error: {err}");
    assert!(out[0].as_ref().unwrap()[0] == want[0] && out[2].as_ref().unwrap()[0] == want[1]);
    assert_eq!((a.pos, bad.pos, c.pos), (pa.len() + 1, pa.len(), pc.len() + 1), "the bad lane did not move");
    let mix = m.decode_lanes(&mut [&mut a, &mut c], &[&[3], &[]]);
    assert!(
        mix.unwrap_err().to_string().contains("no tokens"),
        "a lane of no rows refuses the whole step before it runs"
    );
    assert_eq!((a.pos, c.pos), (pa.len() + 1, pc.len() + 1));
}

#[test]
fn steps_stay_below_the_prompt_paths_row_thresholds_or_hold_one_lane() {
    let rows = [1usize, 1, 1, 6, 1, 2, 1];
    let gemm = Options { exl3_prompt_gemm: Some(4), ..Options::default() };
    let run: Vec<usize> = (0..rows.len()).collect();
    let groups = tf_dsv41::family::step_groups(&gemm, &run, |i| rows[i]);
    assert_eq!(groups, vec![vec![0, 1, 2], vec![3], vec![4, 5], vec![6]], "a lane's kernels follow its own rows");
    assert_eq!(tf_dsv41::family::step_groups(&Options::default(), &run, |i| rows[i]), vec![run.clone()]);
    assert!(tf_dsv41::family::step_groups(&gemm, &[], |i| rows[i]).is_empty(), "no lane left, no step");
}
