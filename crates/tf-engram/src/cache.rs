//! A hot-row cache in front of a table read from disk: CLOCK over a fixed arena, so its memory is set at creation.

use crate::table::{EngramTable, check_gather};
use crate::{EngramError, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use tf_core::bf16;

/// CLOCK replacement over `cap` slots: `touch` says whether a key was held and where its slot is (second-chance LRU).
pub struct Clock {
    slot_of: HashMap<u64, usize>,
    keys: Vec<u64>,
    used: Vec<bool>,
    hand: usize,
    cap: usize,
}

impl Clock {
    pub fn new(cap: usize) -> Clock {
        // Grown as keys arrive: a capacity asked for need not be allocatable up front.
        Clock { slot_of: HashMap::new(), keys: Vec::new(), used: Vec::new(), hand: 0, cap }
    }

    /// The key's slot if held (marking it used).
    pub fn get(&mut self, key: u64) -> Option<usize> {
        let s = *self.slot_of.get(&key)?;
        self.used[s] = true;
        Some(s)
    }

    /// A slot for a key not held: a free one, or the first unused one the hand reaches (the keys it passes get a second chance).
    pub fn insert(&mut self, key: u64) -> Option<usize> {
        if self.cap == 0 {
            return None;
        }
        let s = if self.keys.len() < self.cap {
            self.keys.push(key);
            self.used.push(false);
            self.keys.len() - 1
        } else {
            while self.used[self.hand] {
                self.used[self.hand] = false;
                self.hand = (self.hand + 1) % self.cap;
            }
            let s = self.hand;
            self.hand = (self.hand + 1) % self.cap;
            self.slot_of.remove(&self.keys[s]);
            self.keys[s] = key;
            s
        };
        self.slot_of.insert(key, s);
        Some(s)
    }

    /// `get`, else `insert`: true on a hit (what a reuse measurement counts).
    pub fn touch(&mut self, key: u64) -> bool {
        self.get(key).is_some() || {
            self.insert(key);
            false
        }
    }
}

/// A table whose most reused rows stay in host memory (`rows` of them, decoded); misses go to the inner table in one gather.
pub struct CachedTable<T: EngramTable> {
    inner: T,
    state: Mutex<(Clock, Vec<bf16>)>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl<T: EngramTable> CachedTable<T> {
    /// Fails, naming the table, when the arena of `rows` decoded rows cannot be allocated.
    pub fn new(inner: T, rows: usize) -> Result<CachedTable<T>> {
        let bad = |msg: String| EngramError::BadTable { table: inner.name().to_string(), msg };
        let n = rows.checked_mul(inner.dim()).ok_or_else(|| bad(format!("a cache of {rows} rows overflows")))?;
        let mut arena = Vec::new();
        arena.try_reserve_exact(n).map_err(|e| bad(format!("a cache of {rows} rows ({} bytes): {e}", n * 2)))?;
        arena.resize(n, bf16::ZERO);
        let (hits, misses) = (AtomicU64::new(0), AtomicU64::new(0));
        Ok(CachedTable { inner, state: Mutex::new((Clock::new(rows), arena)), hits, misses })
    }

    /// Rows served from the cache and from the inner table so far.
    pub fn stats(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }
}

impl<T: EngramTable> EngramTable for CachedTable<T> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn rows(&self) -> u64 {
        self.inner.rows()
    }

    fn dim(&self) -> usize {
        self.inner.dim()
    }

    fn gather(&self, ids: &[u64], out: &mut [bf16]) -> Result<()> {
        check_gather(self, ids, out)?;
        let dim = self.dim();
        let mut miss = Vec::new();
        {
            let mut st = self.state.lock();
            let (clock, arena) = &mut *st;
            for (i, (&id, o)) in ids.iter().zip(out.chunks_exact_mut(dim)).enumerate() {
                match clock.get(id) {
                    Some(s) => o.copy_from_slice(&arena[s * dim..(s + 1) * dim]),
                    None => miss.push(i),
                }
            }
        }
        self.hits.fetch_add((ids.len() - miss.len()) as u64, Ordering::Relaxed);
        self.misses.fetch_add(miss.len() as u64, Ordering::Relaxed);
        if miss.is_empty() {
            return Ok(());
        }
        // The disk reads run without the lock, so other readers' hits and reads go on meanwhile.
        let miss_ids: Vec<u64> = miss.iter().map(|&i| ids[i]).collect();
        let mut rows = vec![bf16::ZERO; miss.len() * dim];
        self.inner.gather(&miss_ids, &mut rows)?;
        let mut st = self.state.lock();
        let (clock, arena) = &mut *st;
        for ((&i, &id), row) in miss.iter().zip(&miss_ids).zip(rows.chunks_exact(dim)) {
            out[i * dim..(i + 1) * dim].copy_from_slice(row);
            // Another reader may have cached it meanwhile; a row is a pure function of its id, so either copy serves.
            if clock.get(id).is_none()
                && let Some(s) = clock.insert(id)
            {
                arena[s * dim..(s + 1) * dim].copy_from_slice(row);
            }
        }
        Ok(())
    }
}
