//! An opt-in per-collective profiler: any `Comm` wrapped, each op's ready and end times written as one JSON line per rank.

use crate::{Comm, CommError};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// One collective as a rank saw it: `ready_us` when the rank called it, `end_us` when it returned (Unix microseconds).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// The op's place in this rank's sequence; every rank issues the same ops in the same order, so `seq` matches them up.
    pub seq: u64,
    pub rank: usize,
    pub op: String,
    /// Bytes this rank sent.
    pub bytes: usize,
    pub ready_us: u64,
    pub end_us: u64,
    pub ok: bool,
}

/// A communicator that writes a [`Record`] per collective to `rank-<r>.jsonl` in a folder.
pub struct Profiled {
    inner: Box<dyn Comm>,
    out: Mutex<BufWriter<File>>,
    seq: AtomicU64,
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// This rank's file in `dir`.
pub fn rank_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("rank-{rank}.jsonl"))
}

impl Profiled {
    /// Wraps `inner`, creating `dir` and truncating this rank's file.
    pub fn new(inner: Box<dyn Comm>, dir: &Path) -> std::io::Result<Profiled> {
        std::fs::create_dir_all(dir)?;
        let file = File::create(rank_file(dir, inner.rank()))?;
        Ok(Profiled { inner, out: Mutex::new(BufWriter::new(file)), seq: AtomicU64::new(0) })
    }

    fn timed(
        &self,
        op: &str,
        bytes: usize,
        f: impl FnOnce(&dyn Comm) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        let ready_us = now_us();
        let r = f(&*self.inner);
        let end_us = now_us();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let rec = Record { seq, rank: self.inner.rank(), op: op.into(), bytes, ready_us, end_us, ok: r.is_ok() };
        let mut out = self.out.lock();
        // Flushed per op: a group that is lost ends the process with exit(70), which runs no destructor.
        let _ = serde_json::to_writer(&mut *out, &rec).map_err(std::io::Error::from).and_then(|()| {
            out.write_all(b"\n")?;
            out.flush()
        });
        r
    }
}

impl Comm for Profiled {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn world_size(&self) -> usize {
        self.inner.world_size()
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<(), CommError> {
        self.timed("all_reduce_sum", buf.len() * 4, |c| c.all_reduce_sum(buf))
    }

    fn all_gather(&self, input: &[f32], output: &mut [f32]) -> Result<(), CommError> {
        self.timed("all_gather", input.len() * 4, |c| c.all_gather(input, output))
    }

    fn reduce_scatter_sum(&self, input: &[f32], output: &mut [f32]) -> Result<(), CommError> {
        self.timed("reduce_scatter_sum", input.len() * 4, |c| c.reduce_scatter_sum(input, output))
    }

    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<(), CommError> {
        self.timed("broadcast", buf.len() * 4, |c| c.broadcast(buf, root))
    }

    fn broadcast_bytes(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        let n = if self.rank() == root { buf.len() } else { 0 };
        self.timed("broadcast_bytes", n, |c| c.broadcast_bytes(buf, root))
    }

    fn broadcast_bytes_idle(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        let n = if self.rank() == root { buf.len() } else { 0 };
        // The same collective as the leader's `broadcast_bytes`: a follower's time in it includes its idle wait for the frame.
        self.timed("broadcast_bytes", n, |c| c.broadcast_bytes_idle(buf, root))
    }

    fn barrier(&self) -> Result<(), CommError> {
        self.timed("barrier", 0, |c| c.barrier())
    }

    fn send(&self, buf: &[f32], to: usize) -> Result<(), CommError> {
        self.timed("send", buf.len() * 4, |c| c.send(buf, to))
    }

    fn recv(&self, buf: &mut [f32], from: usize) -> Result<(), CommError> {
        self.timed("recv", 0, |c| c.recv(buf, from))
    }

    fn send_recv(&self, send: &[f32], to: usize, recv: &mut [f32], from: usize) -> Result<(), CommError> {
        self.timed("send_recv", send.len() * 4, |c| c.send_recv(send, to, recv, from))
    }
}

/// Every rank's records from `dir`, by rank.
pub fn read_dir(dir: &Path) -> std::io::Result<Vec<Vec<Record>>> {
    let mut ranks = Vec::new();
    while rank_file(dir, ranks.len()).exists() {
        let f = BufReader::new(File::open(rank_file(dir, ranks.len()))?);
        let recs: std::io::Result<Vec<Record>> =
            f.lines().map(|l| serde_json::from_str(&l?).map_err(std::io::Error::from)).collect();
        ranks.push(recs?);
    }
    Ok(ranks)
}

/// Per op kind over all ranks: calls, bytes sent, mean time in the op, and mean skew (the last rank's ready time minus the first's, per `seq`).
pub fn summarize(ranks: &[Vec<Record>]) -> String {
    #[derive(Default)]
    struct Row {
        calls: u64,
        bytes: u64,
        in_op_us: u64,
        skew_us: u64,
        matched: u64,
    }
    let mut rows: BTreeMap<&str, Row> = BTreeMap::new();
    // Point-to-point ops involve only some ranks: each record is its own call, and collectives line up without them.
    let p2p = |r: &Record| matches!(r.op.as_str(), "send" | "recv" | "send_recv");
    for r in ranks.iter().flatten().filter(|r| p2p(r)) {
        let row = rows.entry(r.op.as_str()).or_default();
        row.calls += 1;
        row.bytes += r.bytes as u64;
        row.in_op_us += r.end_us.saturating_sub(r.ready_us);
    }
    let ranks: Vec<Vec<&Record>> = ranks.iter().map(|r| r.iter().filter(|r| !p2p(r)).collect()).collect();
    let longest = ranks.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..longest {
        let here: Vec<&Record> = ranks.iter().filter_map(|r| r.get(i).copied()).collect();
        let row = rows.entry(here[0].op.as_str()).or_default();
        row.calls += 1;
        row.bytes += here.iter().map(|r| r.bytes as u64).sum::<u64>();
        row.in_op_us += here.iter().map(|r| r.end_us.saturating_sub(r.ready_us)).sum::<u64>() / here.len() as u64;
        if here.len() == ranks.len() && here.iter().all(|r| r.op == here[0].op) {
            let (lo, hi) = here.iter().fold((u64::MAX, 0), |(lo, hi), r| (lo.min(r.ready_us), hi.max(r.ready_us)));
            row.skew_us += hi - lo;
            row.matched += 1;
        }
    }
    let mut s = format!(
        "{} ranks\nop                     calls      bytes sent   mean in op (us)   mean skew (us)\n",
        ranks.len()
    );
    for (op, r) in rows {
        let skew = if r.matched == 0 { "-".to_string() } else { format!("{:.1}", r.skew_us as f64 / r.matched as f64) };
        let mean = r.in_op_us as f64 / r.calls as f64;
        s += &format!("{op:<20} {:>7} {:>15} {mean:>17.1} {skew:>16}\n", r.calls, r.bytes);
    }
    s
}
