//! Engram rows from disk and fetched ahead give the same logits as the mapped tables, bit for bit.

use tf_dsv41::tiny::{TinyKind, write_checkpoint};
use tf_dsv41::{Model, Options};
use tf_engram::IoMode;

/// Prefills `prompt` in chunks of `chunk`, optionally through the read-ahead, then decodes three greedy steps.
fn run(m: &Model, prompt: &[u32], chunk: usize, ahead: bool) -> Vec<Vec<f32>> {
    let mut st = m.new_state();
    let mut pf = ahead.then(|| m.prefetch(&st, prompt, chunk, (2, 2)).unwrap().expect("the model has Engram"));
    let mut out = Vec::new();
    for (i, c) in prompt.chunks(chunk).enumerate() {
        let last = (i + 1) * chunk >= prompt.len();
        let l = match pf.as_mut() {
            Some(pf) => m.prefill_prefetched(&mut st, c, last, pf).unwrap(),
            None => m.prefill(&mut st, c, last).unwrap(),
        };
        out.extend(l);
    }
    for _ in 0..3 {
        let l = out.last().unwrap();
        let t = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32;
        let l = if ahead {
            // The decode row's rows fetched from the moment its token is known, as the lane host does.
            let mut pf = m.prefetch_after(st.engram.as_ref(), &[t], &[1], (1, 2)).unwrap().expect("Engram");
            m.decode_prefetched(&mut st, &[t], &mut pf).unwrap()
        } else {
            m.decode(&mut st, &[t]).unwrap()
        };
        out.push(l.into_iter().next().unwrap());
    }
    out
}

#[test]
fn rows_from_disk_and_fetched_ahead_give_the_same_logits() {
    // O_DIRECT needs a real filesystem: the build's own directory rather than a possible tmpfs.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    write_checkpoint(TinyKind::Tiny, 0, dir.path()).unwrap();
    let prompt: Vec<u32> = (0..300).map(|i| 3 + (i * 7919 % 500) as u32).collect();
    for replay in [true, false] {
        let base = Options { replay, ..Options::default() };
        let mapped = Model::load(dir.path(), base).unwrap();
        assert!(mapped.blocks.iter().any(|b| b.engram.is_some()), "the tiny model has Engram layers");
        let want = run(&mapped, &prompt, 64, false);
        assert_eq!(run(&mapped, &prompt, 64, true), want, "read-ahead, replay {replay}");
        for mode in [IoMode::Mmap, IoMode::Direct] {
            let disk = Model::load(dir.path(), Options { engram_io: Some(mode), ..base }).unwrap();
            assert_eq!(run(&disk, &prompt, 64, true), want, "{mode:?} + read-ahead, replay {replay}");
        }
        // A hot-row cache smaller than one chunk's rows evicts all along and still serves the table's rows.
        let cached =
            Model::load(dir.path(), Options { engram_io: Some(IoMode::Direct), engram_cache_rows: 50, ..base });
        assert_eq!(run(&cached.unwrap(), &prompt, 64, true), want, "hot-row cache, replay {replay}");
    }
    let m = Model::load(dir.path(), Options::default()).unwrap();
    let st = m.new_state();
    let mut pf = m.prefetch(&st, &prompt, 64, (1, 1)).unwrap().unwrap();
    let e = m.prefill_prefetched(&mut m.new_state(), &prompt[..32], false, &mut pf).unwrap_err().to_string();
    assert!(e.contains("prefetched chunks are Some(64) tokens, this chunk is 32"), "{e}");
}
