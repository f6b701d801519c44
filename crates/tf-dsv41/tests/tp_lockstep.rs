//! Tensor parallel in lockstep (issue 25), experts and attention heads split: TP2/3/4/8 equal TP1 and the plain model bit for bit; failures never hang.

mod common;

use common::{argmax, dir};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tf_collective::InProcessComm;
use tf_dsv41::tiny::{TinyKind, write_checkpoint};
use tf_dsv41::tp::lockstep::Leader;
use tf_dsv41::tp::{SharedComm, spawn};
use tf_dsv41::{Error, Model, Options};
use tf_family::Family;

/// Tiny routed to 4 of its 8 experts a token instead of 2: every rank sends outputs for most rows.
fn tiny_top4() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        write_checkpoint(TinyKind::Tiny, 0, d.path()).unwrap();
        for (file, key) in [("config.json", "num_experts_per_tok"), ("inference/config.json", "n_activated_experts")] {
            let (path, from) = (d.path().join(file), format!("\"{key}\": 2"));
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.contains(&from), "{file} routes 2 experts a token");
            std::fs::write(&path, text.replace(&from, &format!("\"{key}\": 4"))).unwrap();
        }
        assert_eq!(Model::load(d.path(), Options::default()).unwrap().cfg.n_activated_experts, 4);
        d
    })
    .path()
}

/// Every logits row of a fixed script: a chunked prompt, greedy decode steps, and verify windows cut back.
fn script<F: Family>(f: &F, vocab: u32, len: usize) -> Vec<Vec<f32>> {
    let prompt: Vec<u32> = (0..len as u32).map(|j| (j * 97 + 5) % (vocab - 4) + 4).collect();
    let mut lane = f.new_lane().unwrap();
    let chunks: Vec<&[u32]> = prompt.chunks(13).collect();
    let (mut rows, mut drafts) = (Vec::new(), Vec::new());
    for (i, c) in chunks.iter().enumerate() {
        rows.extend(f.prefill(&mut lane, c, i + 1 == chunks.len()).unwrap());
    }
    for step in 0..12 {
        let t = argmax(rows.last().unwrap());
        if step % 3 == 2 {
            let out = f.verify(&mut lane, &[t, (t + 1) % vocab, (t + 2) % vocab]).unwrap();
            let keep = 1 + usize::from(argmax(&out[0]) == (t + 1) % vocab);
            rows.extend(out.into_iter().take(keep));
            f.rewind(&mut lane, keep).unwrap();
        } else {
            rows.extend(f.decode(&mut lane, &[t]).unwrap());
        }
        // Drafts (tokens and confidences) join the compared rows: the head and Markov head may be split by vocabulary.
        if let Some(d) = f.draft(&mut lane, argmax(rows.last().unwrap()), 5).unwrap() {
            drafts.push(d.tokens.iter().map(|&t| t as f32).chain(d.confidence).collect());
        }
    }
    let fork = f.fork(&lane).unwrap();
    drop(lane);
    let mut fork = fork;
    rows.extend(f.decode(&mut fork, &[3]).unwrap());
    rows.extend(drafts);
    rows
}

fn check(d: &Path, worlds: &[usize], split_heads: bool) {
    check_with(d, worlds, Options { split_heads, ..Options::default() });
}

fn check_with(d: &Path, worlds: &[usize], opts: Options) {
    let split_heads = opts.split_heads;
    let kind = d.display();
    let plain = Model::load(d, Options::default()).unwrap();
    let vocab = plain.cfg.vocab_size as u32;
    let want: Vec<Vec<Vec<f32>>> = [1, 40, 150].iter().map(|&n| script(&plain, vocab, n)).collect();
    for &world in worlds {
        let (leader, followers) = spawn(d, opts, world, Duration::from_secs(60)).unwrap();
        for (i, &n) in [1, 40, 150].iter().enumerate() {
            let what = if split_heads { "heads and experts" } else { "experts" };
            let what = format!("{what}, rows split from {}", opts.sp_rows);
            assert!(
                script(&leader, vocab, n) == want[i],
                "{kind} TP{world} ({what}), prompt {n}: logits differ from one rank"
            );
        }
        drop(leader);
        for f in followers {
            assert_eq!(f.join().unwrap(), Ok(()), "a follower ends cleanly at the leader's stop");
        }
    }
}

#[test]
fn tiny_tp_equals_one_rank_bit_for_bit() {
    check(dir(TinyKind::Tiny), &[1, 2, 3, 4, 8], false);
    check(tiny_top4(), &[2, 3, 8], false);
}

/// Heads split in whole `wo_a` groups (tiny has 2: worlds 3 and 8 leave ranks without heads) and `wo_b` by 32-row tiles.
#[test]
fn tiny_tp_with_split_heads_equals_one_rank_bit_for_bit() {
    let whole = Model::load(dir(TinyKind::Tiny), Options::default()).unwrap();
    let opts = Options { ep: Some((1, 2)), split_heads: true, ..Options::default() };
    let half = Model::load(dir(TinyKind::Tiny), opts).unwrap();
    let (a, b) = (&whole.blocks[0].attn, &half.blocks[0].attn);
    assert_eq!(b.sink.len() * 2, a.sink.len(), "rank 1 of 2 holds half the heads");
    assert_eq!(b.wq_b.out_features() * 2, a.wq_b.out_features());
    assert!(b.wo_b.out_features() < a.wo_b.out_features() && b.wo_a.len() * 2 == a.wo_a.len());
    assert_eq!(half.head.out * 2, whole.head.out, "and half the vocabulary's head rows");
    let markov = |m: &Model| m.dspark.as_ref().expect("tiny drafts").markov_head.out;
    assert_eq!(markov(&half) * 2, markov(&whole));
    let engram = half.blocks.iter().find_map(|b| b.engram.as_ref()).expect("tiny has Engram layers");
    let rows = engram.table.rows() as usize;
    assert_eq!(
        engram.split.as_ref().map(|t| t.mine()),
        Some(rows / 2..rows),
        "and the second half of each Engram table"
    );
    check(dir(TinyKind::Tiny), &[1, 2, 3, 8], true);
    check(tiny_top4(), &[4], true);
}

/// Routed experts split by width (4 blocks of 32 inner columns: worlds 8 leaves ranks with none), `w2` sums chained rank to rank.
#[test]
fn tp_with_experts_split_by_width_equals_one_rank_bit_for_bit() {
    let width = |split_heads| Options { expert_width: true, split_heads, ..Options::default() };
    let whole = Model::load(dir(TinyKind::Tiny), Options::default()).unwrap();
    let half = Model::load(dir(TinyKind::Tiny), Options { ep: Some((1, 2)), ..width(false) }).unwrap();
    let (a, b) = (&whole.blocks[0].ffn, &half.blocks[0].ffn);
    assert_eq!(b.experts.len(), a.experts.len(), "every rank holds a share of every expert");
    assert_eq!(b.experts[0].w1.out_features() * 2, a.experts[0].w1.out_features());
    assert_eq!(b.experts[0].w2.in_features() * 2, a.experts[0].w2.in_features());
    assert_eq!(b.width.as_ref().map(|w| w.inner.clone()), Some(64..128));
    check_with(dir(TinyKind::Tiny), &[1, 2, 3, 4, 8], width(false));
    check_with(tiny_top4(), &[3], width(true));
    check_with(dir(TinyKind::Small), &[2], width(true));
}

/// Sequence-parallel rows: every call (1) or the 13-row prompt chunks (5) run the row-local projections a share of rows per rank.
#[test]
fn tp_with_sequence_parallel_rows_equals_one_rank_bit_for_bit() {
    let sp = |sp_rows, split_heads| Options { sp_rows, split_heads, ..Options::default() };
    check_with(dir(TinyKind::Tiny), &[2, 3, 4, 8], sp(1, true));
    check_with(dir(TinyKind::Tiny), &[3], sp(5, false));
    check_with(dir(TinyKind::Small), &[4], sp(1, true));
    assert!(gathers(sp(1, true)) > gathers(sp(0, true)), "the row share gathers each split call's rows");
}

/// All-gathers rank 0 of a TP2 group issues over the script's 40-token prompt, from its collective profile.
fn gathers(opts: Options) -> usize {
    let d = tempfile::tempdir().unwrap();
    let profile: &'static Path = Box::leak(d.path().to_path_buf().into_boxed_path());
    let (leader, followers) =
        spawn(dir(TinyKind::Tiny), Options { tp_profile: Some(profile), ..opts }, 2, Duration::from_secs(60)).unwrap();
    script(&leader, leader.model.cfg.vocab_size as u32, 40);
    drop(leader);
    followers.into_iter().for_each(|f| f.join().unwrap().unwrap());
    let text = std::fs::read_to_string(d.path().join("rank-0.jsonl")).unwrap();
    text.lines().filter(|l| l.contains("all_gather")).count()
}

#[test]
fn small_tp_equals_one_rank_bit_for_bit() {
    check(dir(TinyKind::Small), &[2], false);
    check(dir(TinyKind::Small), &[3], true);
}

#[test]
fn a_frame_every_rank_refuses_fails_that_call_and_serving_goes_on() {
    let (leader, _followers) = spawn(dir(TinyKind::Tiny), Options::default(), 3, Duration::from_secs(60)).unwrap();
    let mut lane = leader.new_lane().unwrap();
    leader.prefill(&mut lane, &[5, 6, 7], true).unwrap();
    let err = leader.decode(&mut lane, &[100_000]).unwrap_err();
    assert!(matches!(&err, Error::Refused(m) if m.contains("100000")), "{err}");
    assert!(leader.decode(&mut lane, &[8]).is_ok(), "the next step runs");
}

/// Rank 1 of a TP2 group that takes one frame and then misbehaves: `hang` keeps its communicator, else it drops it (a killed rank).
fn broken_pair(hang: bool, deadline: Duration) -> Leader {
    let mut comms = InProcessComm::group_with_timeout(2, deadline).into_iter();
    let opts = |rank| Options { ep: Some((rank, 2)), ..Options::default() };
    let (c0, c1) = (SharedComm::new(Box::new(comms.next().unwrap())), SharedComm::new(Box::new(comms.next().unwrap())));
    let mut m0 = Model::load(dir(TinyKind::Tiny), opts(0)).unwrap();
    m0.attach_comm(&c0);
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        c1.with(|c| c.broadcast_bytes_idle(&mut bytes, 0)).unwrap();
        if hang {
            std::thread::sleep(Duration::from_secs(3600));
        }
    });
    Leader::new(m0, c0)
}

#[test]
fn a_killed_or_hung_rank_loses_lockstep_within_the_deadline() {
    for hang in [false, true] {
        let deadline = Duration::from_millis(800);
        let leader = broken_pair(hang, deadline);
        let t = Instant::now();
        let err = leader.new_lane().and_then(|mut l| leader.prefill(&mut l, &[5, 6, 7, 8], true)).err();
        let took = t.elapsed();
        assert!(matches!(err, Some(Error::LockstepLost(_))), "hang {hang}: {err:?}");
        assert!(took < deadline * 3, "hang {hang}: took {took:?}");
        assert!(
            matches!(leader.new_lane().err(), Some(Error::LockstepLost(_))),
            "a lost group refuses every later call"
        );
    }
}

#[test]
fn a_lost_group_exits_the_server_process_with_70() {
    if std::env::var_os("TF_TP_CHILD").is_some() {
        let mut leader = broken_pair(false, Duration::from_millis(500));
        leader.exit_on_lost = true;
        let _ = leader.new_lane().and_then(|mut l| leader.prefill(&mut l, &[5, 6, 7, 8], true));
        unreachable!("lockstep was lost, so the process exited");
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", "a_lost_group_exits_the_server_process_with_70", "--nocapture"])
        .env("TF_TP_CHILD", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(70), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Ranks started with different numerics or split flags refuse to start, every one of them, naming the ranks that differ.
#[test]
fn ranks_with_different_options_refuse_to_start() {
    let comms = InProcessComm::group_with_timeout(2, Duration::from_secs(30));
    let loads: Vec<_> = comms
        .into_iter()
        .enumerate()
        .map(|(rank, c)| {
            let opts = Options { sp_rows: 32 + rank, ..Options::default() };
            std::thread::spawn(move || tf_dsv41::tp::same_everywhere(dir(TinyKind::Tiny), &opts, &c).err())
        })
        .collect();
    for l in loads {
        let err = l.join().unwrap().expect("a rank refuses").to_string();
        assert!(err.contains("ranks [1]") && err.contains("same model and flags"), "{err}");
    }
}

/// Three lanes in shared step frames, one of them a verify window every other step, and a bad row that fails only its lane.
fn lanes_script<F: Family>(f: &F, vocab: u32) -> Vec<Vec<f32>> {
    let mut lanes: Vec<F::Lane> = (0..3).map(|_| f.new_lane().unwrap()).collect();
    let mut rows = Vec::new();
    for (i, lane) in lanes.iter_mut().enumerate() {
        let prompt: Vec<u32> = (0..5 + 30 * i as u32).map(|j| (j * 53 + 9) % (vocab - 4) + 4).collect();
        rows.push(f.prefill(lane, &prompt, true).unwrap().unwrap());
    }
    let mut next: Vec<u32> = rows.iter().map(|r| argmax(r)).collect();
    for step in 0..6 {
        let verify = [false, step % 2 == 1, false];
        let windows: Vec<Vec<u32>> = (0..3)
            .map(
                |i| if verify[i] { vec![next[i], (next[i] + 1) % vocab, (next[i] + 2) % vocab] } else { vec![next[i]] },
            )
            .collect();
        let mut w: Vec<&[u32]> = windows.iter().map(Vec::as_slice).collect();
        let bad = [vocab + 1];
        if step == 4 {
            w[2] = &bad;
        }
        let mut pfs: Vec<Option<F::Prefetch>> = (0..3).map(|_| None).collect();
        let out = f.step_lanes(&mut lanes.iter_mut().collect::<Vec<_>>(), &w, &verify, &mut pfs);
        for (i, r) in out.into_iter().enumerate() {
            match r {
                Ok(mut r) if verify[i] => {
                    f.rewind(&mut lanes[i], 1).unwrap();
                    r.truncate(1);
                    next[i] = argmax(&r[0]);
                    rows.extend(r);
                }
                Ok(r) => {
                    next[i] = argmax(&r[0]);
                    rows.extend(r);
                }
                Err(e) => {
                    assert!(step == 4 && i == 2 && e.to_string().contains("outside the vocabulary"), "{e}");
                }
            }
        }
    }
    rows
}

#[test]
fn lanes_in_one_step_frame_equal_one_rank_and_a_bad_row_fails_only_its_lane() {
    let plain = Model::load(dir(TinyKind::Tiny), Options::default()).unwrap();
    let vocab = plain.cfg.vocab_size as u32;
    let want = lanes_script(&plain, vocab);
    assert_eq!(want.len(), 3 + 6 * 3 - 1, "one row per lane a step, but the bad one");
    for (world, split_heads) in [(2, false), (3, true)] {
        let opts = Options { split_heads, ..Options::default() };
        let (leader, followers) = spawn(dir(TinyKind::Tiny), opts, world, Duration::from_secs(60)).unwrap();
        assert!(Family::batches(&leader), "a TP group runs a round's lanes as one frame");
        assert!(
            lanes_script(&leader, vocab) == want,
            "TP{world} (split heads {split_heads}): rows differ from one rank"
        );
        drop(leader);
        for f in followers {
            assert_eq!(f.join().unwrap(), Ok(()));
        }
    }
}

#[test]
fn prompt_read_ahead_under_tp_reads_each_rank_s_own_rows_and_equals_one_rank() {
    let d = dir(TinyKind::Tiny);
    let opts = Options { engram_io: Some(tf_engram::IoMode::Mmap), ..Options::default() };
    let plain = Model::load(d, opts).unwrap();
    let vocab = plain.cfg.vocab_size as u32;
    let prompt: Vec<u32> = (0..150u32).map(|j| (j * 7919 + 3) % (vocab - 4) + 4).collect();
    let chunks = [64usize, 64, 22];
    let bounds: Vec<(usize, usize)> =
        chunks.iter().scan(0, |at, &n| Some((*at, std::mem::replace(at, *at + n) + n))).collect();
    let mut st = plain.new_state();
    let want: Vec<Vec<f32>> =
        bounds.iter().filter_map(|&(a, b)| plain.prefill(&mut st, &prompt[a..b], b == prompt.len()).unwrap()).collect();
    let (leader, followers) = spawn(d, Options { split_heads: true, ..opts }, 2, Duration::from_secs(60)).unwrap();
    let mut lane = leader.new_lane().unwrap();
    let mut pf = Family::prefetch(&leader, None, &prompt, &chunks).unwrap().expect("tables on disk are fetched ahead");
    let mut got = Vec::new();
    for &(a, b) in &bounds {
        got.extend(Family::prefill_prefetched(&leader, &mut lane, &prompt[a..b], b == prompt.len(), &mut pf).unwrap());
    }
    assert!(!want.is_empty() && got == want, "TP2 prefill from each rank's read-ahead equals one rank");
    drop(pf);
    assert!(leader.decode(&mut lane, &[5]).is_ok(), "the next frame frees the read-ahead on every rank");
    drop((lane, leader));
    for f in followers {
        assert_eq!(f.join().unwrap(), Ok(()));
    }
    // Each rank fetches only the rows it owns: the ranks' rows add up to one rank's.
    let fetched = |m: &Model| {
        let mut p = m.prefetch_chunks(&m.new_state(), &prompt, &chunks, (2, 2)).unwrap().expect("Engram on disk");
        chunks.iter().for_each(|&n| drop(p.next_chunk(n).unwrap()));
        p.rows_fetched()
    };
    let whole = fetched(&plain);
    let ranks: Vec<usize> = InProcessComm::group(2)
        .into_iter()
        .map(|c| fetched(&tf_dsv41::tp::load_rank(d, Options { split_heads: true, ..opts }, Box::new(c)).unwrap().0))
        .collect();
    assert!(ranks.iter().all(|&r| 0 < r && r < whole), "each rank reads a share: {ranks:?} of {whole}");
    assert_eq!(ranks.iter().sum::<usize>(), whole, "and the shares add up to the whole");
}
