//! Read-ahead (issue 7): a prompt's Engram rows fetched on background threads, chunks ahead of the forward, in order.

use crate::table::EngramTable;
use crate::{EngramError, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::time::{Duration, Instant};
use tf_core::bf16;

/// One chunk's rows: its distinct ids, sorted, and their bf16 rows in that order.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkRows {
    pub chunk: usize,
    ids: Vec<u64>,
    rows: Vec<bf16>,
    dim: usize,
}

impl ChunkRows {
    /// Distinct rows fetched for this chunk.
    pub fn distinct(&self) -> usize {
        self.ids.len()
    }

    /// The rows of several chunks of one table as one (several lanes' decode rows in one step).
    pub fn merge(parts: &[&ChunkRows]) -> Option<ChunkRows> {
        let first = parts.first()?;
        let dim = first.dim;
        let mut all: Vec<(u64, &[bf16])> =
            parts.iter().flat_map(|p| p.ids.iter().zip(p.rows.chunks_exact(p.dim)).map(|(&id, r)| (id, r))).collect();
        all.sort_by_key(|&(id, _)| id);
        all.dedup_by_key(|&mut (id, _)| id);
        let rows = all.iter().flat_map(|&(_, r)| r.iter().copied()).collect();
        Some(ChunkRows { chunk: first.chunk, ids: all.into_iter().map(|(id, _)| id).collect(), rows, dim })
    }

    /// Writes row `ids[i]` into `out[i·dim..]`, as [`EngramTable::gather`]; an id the chunk did not ask for is an error.
    pub fn gather(&self, ids: &[u64], out: &mut [bf16]) -> Result<()> {
        let dim = self.dim;
        for (&id, o) in ids.iter().zip(out.chunks_exact_mut(dim)) {
            let i = self.ids.binary_search(&id).map_err(|_| EngramError::BadTable {
                table: format!("read-ahead chunk {}", self.chunk),
                msg: format!("row {id} was not fetched for this chunk"),
            })?;
            o.copy_from_slice(&self.rows[i * dim..(i + 1) * dim]);
        }
        Ok(())
    }
}

/// Fetches chunk after chunk in order on a background thread, at most `depth` chunks ahead (bounded memory).
pub struct ReadAhead {
    rx: Option<Receiver<Result<ChunkRows>>>,
    /// A one-chunk read-ahead (a decode step's rows) needs no worker thread: its parts are on the pool already.
    one: Option<Pending>,
    next: usize,
    chunks: usize,
    waits: Vec<Duration>,
    failed: Option<String>,
    stop: Arc<AtomicBool>,
}

/// One part of a chunk's reads: whoever claims it first (a pool reader or the waiter) reads it and sends its rows.
struct Part {
    i: usize,
    ids: Vec<u64>,
    claimed: AtomicBool,
}

type PartRows = (usize, Result<Vec<bf16>>);

fn run_part(part: &Part, table: &dyn EngramTable, tx: &Sender<PartRows>) {
    if part.claimed.swap(true, Ordering::AcqRel) {
        return;
    }
    let mut rows = vec![bf16::ZERO; part.ids.len() * table.dim()];
    let _ = tx.send((part.i, table.gather(&part.ids, &mut rows).map(|()| rows)));
}

/// A chunk's reads handed to the shared reader pool in parts; `wait` reads the parts no reader has started itself, so it never queues behind other prompts' reads.
struct Pending {
    chunk: usize,
    ids: Vec<u64>,
    parts: Vec<Arc<Part>>,
    table: Arc<dyn EngramTable>,
    tx: Sender<PartRows>,
    rx: Receiver<PartRows>,
}

/// Submits the chunk's sorted distinct ids to the reader pool in `threads` parts.
fn submit(table: &Arc<dyn EngramTable>, chunk: usize, ids: &[u64], threads: usize) -> Pending {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let per = ids.len().div_ceil(threads.max(1)).max(1);
    crate::readers::ensure(threads.max(1));
    let (tx, rx) = channel();
    let parts: Vec<Arc<Part>> = ids
        .chunks(per)
        .enumerate()
        .map(|(i, p)| Arc::new(Part { i, ids: p.to_vec(), claimed: AtomicBool::new(false) }))
        .collect();
    for part in &parts {
        let (part, reader, tx) = (part.clone(), table.clone(), tx.clone());
        // A part no reader could take is read by the waiter.
        crate::readers::submit(move || run_part(&part, reader.as_ref(), &tx));
    }
    Pending { chunk, ids, parts, table: table.clone(), tx, rx }
}

impl Pending {
    fn wait(self) -> Result<ChunkRows> {
        let Pending { chunk, ids, parts, table, tx, rx } = self;
        parts.iter().for_each(|p| run_part(p, table.as_ref(), &tx));
        // Only the readers' senders remain: a reader that died mid-part ends the wait instead of hanging it.
        drop(tx);
        let mut got: Vec<PartRows> = rx.iter().take(parts.len()).collect();
        if got.len() != parts.len() {
            let msg = "a read thread stopped before its part".into();
            return Err(EngramError::BadTable { table: table.name().to_string(), msg });
        }
        got.sort_by_key(|(i, _)| *i);
        let dim = table.dim();
        let mut rows = Vec::with_capacity(ids.len() * dim);
        for (_, part) in got {
            rows.extend(part?);
        }
        Ok(ChunkRows { chunk, ids, rows, dim })
    }
}

fn produce(
    table: Arc<dyn EngramTable>,
    chunks: Vec<Vec<u64>>,
    threads: usize,
    tx: SyncSender<Result<ChunkRows>>,
    stop: Arc<AtomicBool>,
) {
    for (i, ids) in chunks.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let r = submit(&table, i, ids, threads).wait();
        let failed = r.is_err();
        // A send fails only when the forward dropped the read-ahead: nothing left to do.
        if tx.send(r).is_err() || failed {
            return;
        }
    }
}

impl ReadAhead {
    /// Starts fetching `chunks` (the row ids each chunk of the forward will gather, repeats allowed) from `table`.
    pub fn start(table: Arc<dyn EngramTable>, chunks: Vec<Vec<u64>>, depth: usize, threads: usize) -> ReadAhead {
        let (n, stop) = (chunks.len(), Arc::new(AtomicBool::new(false)));
        let (mut rx, mut one, mut failed) = (None, None, None);
        if n == 1 {
            one = Some(submit(&table, 0, &chunks[0], threads));
        } else {
            // The channel holds `depth` finished chunks; the worker blocks on the next, so memory stays bounded.
            let (tx, r) = sync_channel(depth.max(1));
            let flag = stop.clone();
            // The worker is never joined: it ends after its current chunk once the receiver is gone.
            let spawned = std::thread::Builder::new()
                .name("engram-readahead".into())
                .spawn(move || produce(table, chunks, threads, tx, flag));
            // A thread the system refuses fails this prompt's chunks (the request), never the caller's thread.
            failed = spawned.err().map(|e| format!("cannot start the read-ahead thread: {e}"));
            rx = Some(r);
        }
        ReadAhead { rx, one, next: 0, chunks: n, waits: Vec::with_capacity(n), failed, stop }
    }

    /// The next chunk's rows, in order; blocks (and counts the wait) only when the disk is behind. After an error every later call returns it again: the request fails, nothing hangs.
    pub fn next_chunk(&mut self) -> Result<ChunkRows> {
        let ended = |msg: String| EngramError::BadTable { table: "read-ahead".into(), msg };
        if self.failed.is_none() && self.next >= self.chunks {
            return Err(ended(format!("all {} chunks were already taken", self.chunks)));
        }
        if self.failed.is_none() {
            let t = Instant::now();
            let got = match self.one.take() {
                Some(p) => Ok(p.wait()),
                None => self.rx.as_ref().expect("present until drop").recv(),
            };
            self.waits.push(t.elapsed());
            match got {
                Ok(Ok(c)) if c.chunk == self.next => {
                    self.next += 1;
                    return Ok(c);
                }
                Ok(Ok(c)) => self.failed = Some(format!("chunk {} arrived when {} was due", c.chunk, self.next)),
                Ok(Err(e)) => self.failed = Some(e.to_string()),
                Err(_) => self.failed = Some(format!("the reader stopped before chunk {}", self.next)),
            }
        }
        Err(ended(self.failed.clone().expect("set on every path that gets here")))
    }

    /// How long each `next_chunk` call waited, in order.
    pub fn waits(&self) -> &[Duration] {
        &self.waits
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the receiver unblocks a worker waiting to send; it ends after its current chunk, so a cancelled prompt never waits on the disk.
        self.rx.take();
    }
}

#[cfg(test)]
mod tests {
    use super::ChunkRows;
    use tf_core::bf16;

    fn chunk(ids: &[u64], dim: usize) -> ChunkRows {
        let rows =
            ids.iter().flat_map(|&id| (0..dim).map(move |c| bf16::from_f32((id * 10 + c as u64) as f32))).collect();
        ChunkRows { chunk: 0, ids: ids.to_vec(), rows, dim }
    }

    #[test]
    fn merged_chunks_serve_every_lane_row_once() {
        let (a, b) = (chunk(&[3, 7, 9], 2), chunk(&[1, 7, 12], 2));
        let m = ChunkRows::merge(&[&a, &b]).expect("two parts");
        assert_eq!(m.distinct(), 5);
        let mut out = vec![bf16::ZERO; 4 * 2];
        m.gather(&[12, 3, 7, 1], &mut out).expect("every id was fetched by one part");
        let want: Vec<f32> = [120.0, 121.0, 30.0, 31.0, 70.0, 71.0, 10.0, 11.0].to_vec();
        assert_eq!(out.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), want);
        assert!(m.gather(&[5], &mut out[..2]).is_err(), "an id no part fetched is still an error");
        assert!(ChunkRows::merge(&[]).is_none());
    }
}
