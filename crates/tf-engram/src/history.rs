//! Per-sequence n-gram history: the last few compressed ids, kept a little longer so rejected drafts can roll back.

use crate::{EngramError, Result};
use std::collections::VecDeque;

/// The compressed id of a token that takes no part in any n-gram (image spans); look-back stops at it.
pub const DEAD: i64 = -1;

/// Tokens a fresh history can roll back: more than a DSpark verify window (block 5 + 1).
pub const DEFAULT_MAX_ROLLBACK: usize = 16;

/// One sequence's hashing state; `Clone` is a snapshot, `rollback` undoes the newest tokens.
#[derive(Clone, Debug)]
pub struct NgramHistory {
    recent: VecDeque<i64>,
    position: u64,
    lookback: usize,
    keep: usize,
}

impl NgramHistory {
    /// A history for hashing `lookback` tokens back, able to roll back `max_rollback` tokens.
    pub fn new(lookback: usize, max_rollback: usize) -> NgramHistory {
        let keep = lookback + max_rollback;
        NgramHistory { recent: VecDeque::with_capacity(keep + 1), position: 0, lookback, keep }
    }

    /// Tokens hashed so far: the absolute position of the next token.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// How many of the newest tokens `rollback` can undo now.
    pub fn rollback_available(&self) -> u64 {
        let stored = self.recent.len() as u64;
        if stored == self.position { stored } else { stored.saturating_sub(self.lookback as u64) }
    }

    /// Forgets the newest `n` tokens, as if they had never been hashed.
    pub fn rollback(&mut self, n: u64) -> Result<()> {
        let available = self.rollback_available();
        if n > available {
            return Err(EngramError::Rollback { requested: n, available });
        }
        self.recent.truncate(self.recent.len() - n as usize);
        self.position -= n;
        Ok(())
    }

    /// Back to an empty sequence.
    pub fn reset(&mut self) {
        self.recent.clear();
        self.position = 0;
    }

    /// The compressed id `k` tokens before the next one (k ≥ 1), or `None` before the sequence start.
    pub(crate) fn back(&self, k: usize) -> Option<i64> {
        if k as u64 > self.position {
            return None;
        }
        debug_assert!(k <= self.recent.len(), "history keeps at least the look-back window");
        Some(self.recent[self.recent.len() - k])
    }

    pub(crate) fn push(&mut self, compressed: i64) {
        self.recent.push_back(compressed);
        if self.recent.len() > self.keep {
            self.recent.pop_front();
        }
        self.position += 1;
    }
}
