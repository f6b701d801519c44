//! Tables on disk: rows through the store equal rows read directly (shards and packed, mmap and O_DIRECT), bad tables refused at load, and the read-ahead neither reorders nor drops a row and fails a request on an I/O error.

use proptest::prelude::*;
use std::sync::Arc;
use tf_core::rng::SplitMix64;
use tf_core::st::write::write_file;
use tf_core::{Checkpoint, DType, Tensor, bf16};
use tf_engram::{EngramTable, FileTable, IoMode, ReadAhead, TensorTable, write_packed};

const NAME: &str = "layers.1.engram.embed";

/// A directory on the build's own disk: O_DIRECT needs a filesystem that supports it (tmpfs does not).
fn dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// Random FP8 codes (no NaN) and E8M0 scales near 1 for `rows × dim`.
fn random(rows: usize, dim: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let mut rng = SplitMix64::new(seed);
    let codes = (0..rows * dim)
        .map(|_| (rng.next_u64() % 256) as u8)
        .map(|c| if c & 0x7F == 0x7F { 0x7E } else { c })
        .collect();
    let scales = (0..rows * dim / 32).map(|_| 120 + (rng.next_u64() % 14) as u8).collect();
    (codes, scales)
}

/// The table as a safetensors shard (with a filler tensor first, so the data does not start at the header) and in memory.
fn shard(d: &std::path::Path, rows: usize, dim: usize, codes: &[u8], scales: &[u8]) -> (Checkpoint, TensorTable) {
    let w = Tensor::from_bytes(DType::F8E4M3, &[rows, dim], codes).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[rows, dim / 32], scales).unwrap();
    let filler = Tensor::from_f32(&[333], &vec![1.5; 333]).unwrap();
    let path = d.join("model-00001-of-00001.safetensors");
    write_file(&path, &[("a.filler", &filler), (&format!("{NAME}.weight"), &w), (&format!("{NAME}.scale"), &s)], None)
        .unwrap();
    (Checkpoint::open(&path).unwrap(), TensorTable::new(NAME, w, s).unwrap())
}

fn gather(t: &dyn EngramTable, ids: &[u64]) -> Vec<u16> {
    let mut out = vec![bf16::ZERO; ids.len() * t.dim()];
    t.gather(ids, &mut out).unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn rows_through_the_store_equal_rows_read_directly() {
    let d = dir();
    let (rows, dim) = (1000, 256);
    let (codes, scales) = random(rows, dim, 1);
    let (ck, direct) = shard(d.path(), rows, dim, &codes, &scales);
    let packed = d.path().join("table.engram");
    write_packed(&packed, (rows as u64, dim), &codes, &scales).unwrap();
    let mut rng = SplitMix64::new(2);
    let mut ids: Vec<u64> = (0..300).map(|_| rng.next_u64() % rows as u64).collect();
    ids.extend([0, rows as u64 - 1, 17, 17]);
    let want = gather(&direct, &ids);
    for mode in [IoMode::Mmap, IoMode::Direct] {
        let s = FileTable::open_shards(&ck, NAME, (rows as u64, dim), mode).unwrap();
        assert_eq!(gather(&s, &ids), want, "shards, {mode:?}");
        let p = FileTable::open_packed(&packed, NAME, (rows as u64, dim), mode).unwrap();
        assert_eq!(gather(&p, &ids), want, "packed, {mode:?}");
        let mut out = vec![bf16::ZERO; dim];
        let e = p.gather(&[rows as u64], &mut out).unwrap_err().to_string();
        assert!(e.contains(NAME) && e.contains("out of range"), "{e}");
    }
}

#[test]
fn a_table_that_does_not_match_the_config_is_refused_naming_it() {
    let d = dir();
    let (rows, dim) = (64, 64);
    let (codes, scales) = random(rows, dim, 3);
    let (ck, _) = shard(d.path(), rows, dim, &codes, &scales);
    let e = FileTable::open_shards(&ck, NAME, (65, dim), IoMode::Mmap).unwrap_err().to_string();
    assert!(e.contains(NAME) && e.contains("[65, 64]"), "{e}");
    let e = FileTable::open_shards(&ck, "layers.14.engram.embed", (64, 64), IoMode::Mmap).unwrap_err().to_string();
    assert!(e.contains("layers.14.engram.embed.weight") && e.contains("missing shard"), "{e}");
    let packed = d.path().join("t.engram");
    write_packed(&packed, (rows as u64, dim), &codes, &scales).unwrap();
    let e = FileTable::open_packed(&packed, NAME, (rows as u64, 128), IoMode::Direct).unwrap_err().to_string();
    assert!(e.contains(NAME) && e.contains("64 rows × 64"), "{e}");
    // A copy cut short by one byte is truncated.
    let bytes = std::fs::read(&packed).unwrap();
    std::fs::write(&packed, &bytes[..bytes.len() - 1]).unwrap();
    for mode in [IoMode::Mmap, IoMode::Direct] {
        let e = FileTable::open_packed(&packed, NAME, (rows as u64, dim), mode).unwrap_err().to_string();
        assert!(e.contains(NAME) && e.contains("truncated"), "{mode:?}: {e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn the_read_ahead_neither_reorders_nor_drops_a_row(seed in any::<u64>(), n in 1usize..12, depth in 1usize..4, threads in 1usize..4) {
        let (rows, dim) = (200, 64);
        let (codes, scales) = random(rows, dim, seed);
        let w = Tensor::from_bytes(DType::F8E4M3, &[rows, dim], &codes).unwrap();
        let s = Tensor::from_bytes(DType::F8E8M0, &[rows, dim / 32], &scales).unwrap();
        let table: Arc<dyn EngramTable> = Arc::new(TensorTable::new(NAME, w, s).unwrap());
        let mut rng = SplitMix64::new(seed ^ 7);
        let chunks: Vec<Vec<u64>> = (0..n).map(|_| (0..rng.next_u64() % 40 + 1).map(|_| rng.next_u64() % rows as u64).collect()).collect();
        let mut ra = ReadAhead::start(table.clone(), chunks.clone(), depth, threads);
        for (i, ids) in chunks.iter().enumerate() {
            let c = ra.next_chunk().unwrap();
            prop_assert_eq!(c.chunk, i);
            let mut got = vec![bf16::ZERO; ids.len() * dim];
            c.gather(ids, &mut got).unwrap();
            prop_assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), gather(table.as_ref(), ids));
        }
        prop_assert!(ra.next_chunk().is_err(), "no chunk past the last");
        prop_assert_eq!(ra.waits().len(), n, "one wait recorded per chunk taken");
    }
}

#[test]
fn an_io_error_mid_prompt_fails_that_request_and_nothing_hangs() {
    let d = dir();
    let (rows, dim) = (512, 256);
    let (codes, scales) = random(rows, dim, 9);
    let packed = d.path().join("t.engram");
    write_packed(&packed, (rows as u64, dim), &codes, &scales).unwrap();
    let table = Arc::new(FileTable::open_packed(&packed, NAME, (rows as u64, dim), IoMode::Direct).unwrap());
    // The disk loses the second half of the table after it was opened: reads there come back short.
    let f = std::fs::OpenOptions::new().write(true).open(&packed).unwrap();
    f.set_len(4096 + 264 * 256).unwrap();
    let chunks = vec![vec![1, 2, 3], vec![4, 400], vec![5]];
    let mut ra = ReadAhead::start(table.clone(), chunks, 2, 2);
    assert!(ra.next_chunk().is_ok(), "the first chunk's rows are intact");
    let e = ra.next_chunk().unwrap_err().to_string();
    assert!(e.contains(NAME) && e.contains("short read"), "{e}");
    assert!(ra.next_chunk().unwrap_err().to_string().contains("short read"), "later calls fail the same way");
    drop(ra);
    let mut out = vec![bf16::ZERO; dim];
    table.gather(&[7], &mut out).unwrap();
}

#[test]
fn many_read_aheads_share_one_bounded_reader_pool_and_each_gets_its_own_rows() {
    let (rows, dim) = (300usize, 64usize);
    let (codes, scales) = random(rows, dim, 11);
    let w = Tensor::from_bytes(DType::F8E4M3, &[rows, dim], &codes).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[rows, dim / 32], &scales).unwrap();
    let mem: Arc<dyn EngramTable> = Arc::new(TensorTable::new(NAME, w, s).unwrap());
    let mut ras: Vec<(Vec<Vec<u64>>, ReadAhead)> = (0..24u64)
        .map(|k| {
            let chunks: Vec<Vec<u64>> =
                (0..3).map(|c| (0..40).map(|i| (k * 7 + c * 13 + i * 5) % rows as u64).collect()).collect();
            (chunks.clone(), ReadAhead::start(mem.clone(), chunks, 2, 8))
        })
        .collect();
    for (chunks, ra) in &mut ras {
        for ids in chunks.iter() {
            let (mut got, mut want) = (vec![bf16::ZERO; ids.len() * dim], vec![bf16::ZERO; ids.len() * dim]);
            ra.next_chunk().unwrap().gather(ids, &mut got).unwrap();
            mem.gather(ids, &mut want).unwrap();
            assert_eq!(got, want);
        }
    }
    // 24 read-aheads asking for 8 readers each share the process's pool, which grows only to the largest request (64 in this file), not their sum.
    let n = tf_engram::reader_threads();
    assert!((8..=64).contains(&n), "{n} reader threads");
}

#[test]
fn the_hot_row_cache_serves_the_tables_rows_keeps_its_size_and_counts_hits() {
    let (rows, dim) = (200usize, 64usize);
    let (codes, scales) = random(rows, dim, 21);
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let packed = d.path().join("t.engram");
    write_packed(&packed, (rows as u64, dim), &codes, &scales).unwrap();
    let file = FileTable::open_packed(&packed, NAME, (rows as u64, dim), IoMode::Direct).unwrap();
    let cached = tf_engram::CachedTable::new(file, 16).unwrap();
    let w = Tensor::from_bytes(DType::F8E4M3, &[rows, dim], &codes).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[rows, dim / 32], &scales).unwrap();
    let mem = TensorTable::new(NAME, w, s).unwrap();
    let mut rng = SplitMix64::new(5);
    for round in 0..40 {
        // A few hot rows repeat in every call; the rest are spread over the table, so the 16 slots keep evicting.
        let ids: Vec<u64> = (0..24).map(|i| if i < 6 { i % 3 } else { rng.next_u64() % rows as u64 }).collect();
        let (mut got, mut want) = (vec![bf16::ZERO; ids.len() * dim], vec![bf16::ZERO; ids.len() * dim]);
        cached.gather(&ids, &mut got).unwrap();
        mem.gather(&ids, &mut want).unwrap();
        assert_eq!(got, want, "round {round}");
    }
    let (hits, misses) = cached.stats();
    assert_eq!(hits + misses, 40 * 24);
    assert!(hits >= 39 * 6, "the hot rows are served from memory after the first call: {hits} hits");
    assert!(cached.gather(&[rows as u64], &mut vec![bf16::ZERO; dim]).is_err(), "an id past the table is refused");
    let mut clock = tf_engram::Clock::new(2);
    assert_eq!((clock.touch(1), clock.touch(2), clock.touch(1), clock.touch(3)), (false, false, true, false));
    assert!(clock.touch(1), "the used key had a second chance, the other was evicted");
    assert!(!clock.touch(2));
}

/// A table whose reads of ids at or past `from` wait until opened, counting the reads that are waiting.
struct Gated {
    inner: TensorTable,
    from: u64,
    state: std::sync::Mutex<(bool, usize)>,
    cv: std::sync::Condvar,
}

impl EngramTable for Gated {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn rows(&self) -> u64 {
        self.inner.rows()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn gather(&self, ids: &[u64], out: &mut [bf16]) -> tf_engram::Result<()> {
        if ids.iter().any(|&i| i >= self.from) {
            let mut st = self.state.lock().unwrap();
            st.1 += 1;
            self.cv.notify_all();
            while !st.0 {
                st = self.cv.wait(st).unwrap();
            }
        }
        self.inner.gather(ids, out)
    }
}

#[test]
fn a_waiting_read_ahead_reads_its_own_parts_when_every_pool_reader_is_busy() {
    let (rows, dim) = (400usize, 64usize);
    let (codes, scales) = random(rows, dim, 31);
    let w = Tensor::from_bytes(DType::F8E4M3, &[rows, dim], &codes).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[rows, dim / 32], &scales).unwrap();
    let gated = Arc::new(Gated {
        inner: TensorTable::new(NAME, w, s).unwrap(),
        from: 200,
        state: Default::default(),
        cv: Default::default(),
    });
    let table: Arc<dyn EngramTable> = gated.clone();
    // Two prompts' reads of gated rows, 64 parts each: more than the 64 pool readers, so all of them block.
    let slow: Vec<ReadAhead> = (0..2u64)
        .map(|k| ReadAhead::start(table.clone(), vec![(200 + k * 64..264 + k * 64).collect(), vec![399]], 1, 64))
        .collect();
    let busy = || gated.state.lock().unwrap().1;
    while busy() < 64 + 2 {
        std::thread::yield_now();
    }
    // A decode step's rows: its tasks queue behind the blocked ones, so only the waiter itself can read them.
    let ids: Vec<u64> = vec![5, 17, 3, 150, 17];
    let (tx, rx) = std::sync::mpsc::channel();
    let (t, i) = (table.clone(), ids.clone());
    std::thread::spawn(move || {
        let _ = tx.send(ReadAhead::start(t, vec![i], 1, 8).next_chunk());
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(120));
    *gated.state.lock().unwrap() = (true, 0);
    gated.cv.notify_all();
    drop(slow);
    let got = got.expect("the decode rows came back while the pool was busy").unwrap();
    let (mut a, mut b) = (vec![bf16::ZERO; ids.len() * dim], vec![bf16::ZERO; ids.len() * dim]);
    got.gather(&ids, &mut a).unwrap();
    gated.inner.gather(&ids, &mut b).unwrap();
    assert_eq!(a, b);
}
