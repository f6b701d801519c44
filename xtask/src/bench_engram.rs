//! `cargo xtask bench engram`: Engram rows from a cold disk table, against the disk's own rates, and the forward's wait.

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tf_core::rng::SplitMix64;
use tf_engram::{AlignedBuf, EngramTable, FileTable, IoMode, ReadAhead, packed_header};

const USAGE: &str = "usage: cargo xtask bench engram [--dir D] [--size-gb G] [--prompt N] [--chunk N] [--prefill-tps R] [--threads T] [--depth K]";
/// Bytes per packed row: 256 FP8 codes and 8 E8M0 scales.
const ROW: u64 = 264;
/// Engram ids per token: 3 n-gram orders × 8 heads in each of V4.1's two Engram layers (one file stands in for both).
const IDS_PER_TOKEN: usize = 2 * 24;

struct Opts {
    dir: PathBuf,
    size_gb: f64,
    prompt: usize,
    chunk: usize,
    prefill_tps: f64,
    threads: usize,
    depth: usize,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        dir: PathBuf::from("target/engram-bench"),
        size_gb: 4.0,
        prompt: 32_768,
        chunk: 4096,
        prefill_tps: 4000.0,
        threads: 16,
        depth: 4,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value\n{USAGE}"))?;
        let num = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--dir" => o.dir = PathBuf::from(v),
            "--size-gb" => o.size_gb = num(v)?,
            "--prompt" => o.prompt = num(v)? as usize,
            "--chunk" => o.chunk = num(v)? as usize,
            "--prefill-tps" => o.prefill_tps = num(v)?,
            "--threads" => o.threads = num(v)? as usize,
            "--depth" => o.depth = num(v)? as usize,
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    Ok(o)
}

/// Drops the file's pages from the page cache so the next pass reads the disk.
fn cold(path: &Path) -> Result<(), String> {
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor; the call only advises the kernel.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc == 0 { Ok(()) } else { Err(format!("posix_fadvise: error {rc}")) }
}

/// The packed table of about `size_gb`, written once (random rows) and reused.
fn table_file(o: &Opts) -> Result<(PathBuf, u64), String> {
    std::fs::create_dir_all(&o.dir).map_err(|e| e.to_string())?;
    let rows = (o.size_gb * 1e9 / ROW as f64) as u64;
    let path = o.dir.join(format!("table-{rows}.engram"));
    if !path.exists() {
        println!("writing {} ({:.1} GB, {rows} rows) ...", path.display(), rows as f64 * ROW as f64 / 1e9);
        let block = 1 << 20;
        let tmp = path.with_extension("partial");
        let mut rng = SplitMix64::new(1);
        let mut codes = vec![0u8; (rows as usize).min(block) * 256];
        let mut scales = vec![0u8; codes.len() / 32];
        // Streamed in slabs of rows in the packed layout (write_packed would need the whole table in memory).
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(|e| e.to_string())?);
        use std::io::Write;
        f.write_all(&packed_header(rows, 256)).map_err(|e| e.to_string())?;
        let mut left = rows as usize;
        while left > 0 {
            let n = left.min(block);
            codes[..n * 256].iter_mut().for_each(|c| *c = (rng.next_u64() % 0x7E) as u8);
            scales[..n * 8].iter_mut().for_each(|s| *s = 120 + (rng.next_u64() % 14) as u8);
            for (c, s) in codes[..n * 256].chunks_exact(256).zip(scales[..n * 8].chunks_exact(8)) {
                f.write_all(c).and_then(|_| f.write_all(s)).map_err(|e| e.to_string())?;
            }
            left -= n;
        }
        f.flush().map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, &path).map_err(|e| e.to_string())?;
    }
    Ok((path, rows))
}

/// The disk's own rates on this file with O_DIRECT: sequential 1 MiB reads (MB/s) and random 4 KiB reads (IOPS) on `threads`.
fn disk_rates(path: &Path, threads: usize) -> Result<(f64, f64), String> {
    cold(path)?;
    let f = Arc::new(
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).map_err(|e| e.to_string())?,
    );
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    let mut buf = AlignedBuf::default();
    let (seq_bytes, t) = ((len / 2).min(2 << 30) / (1 << 20) * (1 << 20), Instant::now());
    let mut off = 0;
    while off < seq_bytes {
        f.read_exact_at(buf.get(1 << 20), off).map_err(|e| e.to_string())?;
        off += 1 << 20;
    }
    let seq = seq_bytes as f64 / t.elapsed().as_secs_f64() / 1e6;
    let per = 20_000 / threads.max(1);
    let t = Instant::now();
    std::thread::scope(|s| {
        for th in 0..threads.max(1) {
            let f = f.clone();
            s.spawn(move || {
                let (mut rng, mut b) = (SplitMix64::new(th as u64 + 9), AlignedBuf::default());
                for _ in 0..per {
                    let page = rng.next_u64() % (len / 4096 - 1);
                    let _ = f.read_exact_at(b.get(4096), page * 4096);
                }
            });
        }
    });
    Ok((seq, (per * threads.max(1)) as f64 / t.elapsed().as_secs_f64()))
}

/// Random ids per chunk (Engram hashes are uniform over the rows), `IDS_PER_TOKEN` per token.
fn chunk_ids(o: &Opts, rows: u64, seed: u64) -> Vec<Vec<u64>> {
    let mut rng = SplitMix64::new(seed);
    (0..o.prompt.div_ceil(o.chunk))
        .map(|_| (0..o.chunk * IDS_PER_TOKEN).map(|_| rng.next_u64() % rows).collect())
        .collect()
}

pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let (path, rows) = table_file(&o)?;
    let table =
        |mode| FileTable::open_packed(&path, "bench", (rows, 256), mode).map(Arc::new).map_err(|e| e.to_string());
    let (seq, iops) = disk_rates(&path, o.threads)?;
    println!(
        "disk, O_DIRECT on this file: sequential {seq:.0} MB/s; random 4 KiB reads on {} threads {iops:.0} IOPS ({:.0} MB/s)",
        o.threads,
        iops * 4096.0 / 1e6
    );
    let direct: Arc<dyn EngramTable> = table(IoMode::Direct)?;
    cold(&path)?;
    let ids: Vec<u64> = chunk_ids(&o, rows, 5).concat().into_iter().take(200_000).collect();
    let t = Instant::now();
    let mut ra = ReadAhead::start(direct.clone(), vec![ids.clone()], 1, o.threads);
    let got = ra.next_chunk().map_err(|e| e.to_string())?;
    let s = t.elapsed().as_secs_f64();
    let rps = got.distinct() as f64 / s;
    println!(
        "gather, cold, O_DIRECT, {} threads: {:.0} rows/s, {:.0} MB/s of rows ({:.2} of the random-read IOPS)",
        o.threads,
        rps,
        rps * ROW as f64 / 1e6,
        rps / iops
    );
    let compute = Duration::from_secs_f64(o.chunk as f64 / o.prefill_tps);
    let chunks = chunk_ids(&o, rows, 6);
    let prefill = compute.as_secs_f64() * chunks.len() as f64;
    cold(&path)?;
    let mut off_wait = Duration::ZERO;
    for ids in &chunks {
        let t = Instant::now();
        // Read-ahead off: the chunk's rows are read when the forward reaches them, with the same parallel reads.
        let mut ra = ReadAhead::start(direct.clone(), vec![ids.clone()], 1, o.threads);
        ra.next_chunk().map_err(|e| e.to_string())?;
        off_wait += t.elapsed();
        std::thread::sleep(compute);
    }
    cold(&path)?;
    let mut ra = ReadAhead::start(direct.clone(), chunks.clone(), o.depth, o.threads);
    let mut on_wait = Duration::ZERO;
    for _ in &chunks {
        let t = Instant::now();
        ra.next_chunk().map_err(|e| e.to_string())?;
        on_wait += t.elapsed();
        std::thread::sleep(compute);
    }
    let pct = |w: Duration| 100.0 * w.as_secs_f64() / prefill;
    println!(
        "cold {}-token prompt, {} chunks of {}, stand-in prefill {} tok/s ({:.2} s): wait on Engram reads {:.2} s ({:.1} %) with read-ahead off, {:.2} s ({:.1} %) with it on (depth {}); target < 5 %",
        o.prompt,
        chunks.len(),
        o.chunk,
        o.prefill_tps,
        prefill,
        off_wait.as_secs_f64(),
        pct(off_wait),
        on_wait.as_secs_f64(),
        pct(on_wait),
        o.depth
    );
    println!(
        "per chunk, read-ahead on: {:?}",
        ra.waits().iter().map(|w| format!("{:.3}", w.as_secs_f64())).collect::<Vec<_>>()
    );
    Ok(())
}
