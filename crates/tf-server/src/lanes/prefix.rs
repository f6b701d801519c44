//! Prompt cache: lane snapshots taken at block boundaries of prompts, found again by longest token prefix.

use std::collections::HashMap;

/// FNV-1a over token ids, extended block by block so every block-aligned prefix of a prompt has a key.
fn extend_hash(mut h: u64, tokens: &[u32]) -> u64 {
    for t in tokens {
        for b in t.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    h
}

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;

struct Entry<L> {
    tokens: Vec<u32>,
    lane: L,
    last_used: u64,
}

/// Snapshots keyed by the hash of the tokens they hold, evicted least recently used past a token budget.
pub struct PrefixCache<L> {
    block: usize,
    budget: usize,
    used: usize,
    clock: u64,
    entries: HashMap<u64, Entry<L>>,
}

impl<L> PrefixCache<L> {
    /// `block` tokens per cache block; `budget` tokens held in all snapshots together (0 turns the cache off).
    pub fn new(block: usize, budget: usize) -> PrefixCache<L> {
        PrefixCache { block: block.max(1), budget, used: 0, clock: 0, entries: HashMap::new() }
    }

    /// Where a prompt of `len` tokens should be snapshotted: the last block boundary that leaves a token to prefill.
    pub fn snapshot_point(&self, len: usize) -> Option<usize> {
        let at = len.saturating_sub(1) / self.block * self.block;
        (self.budget > 0 && at > 0 && at <= self.budget).then_some(at)
    }

    /// The longest cached prefix of `prompt` that leaves at least one token to prefill, with its snapshot.
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<(usize, &L)> {
        let max = self.snapshot_point(prompt.len())?;
        let mut keys = Vec::with_capacity(max / self.block);
        let mut h = FNV_OFFSET;
        for start in (0..max).step_by(self.block) {
            h = extend_hash(h, &prompt[start..start + self.block]);
            keys.push((start + self.block, h));
        }
        self.clock += 1;
        let clock = self.clock;
        let (len, key) = keys.into_iter().rev().find(|(len, key)| {
            self.entries.get(key).is_some_and(|e| e.tokens.len() == *len && e.tokens == prompt[..*len])
        })?;
        let e = self.entries.get_mut(&key).expect("just found");
        e.last_used = clock;
        Some((len, &e.lane))
    }

    /// Whether a snapshot of exactly these tokens is held.
    pub fn contains(&self, tokens: &[u32]) -> bool {
        self.entries.get(&extend_hash(FNV_OFFSET, tokens)).is_some_and(|e| e.tokens == tokens)
    }

    /// Stores a snapshot of a lane that has processed exactly `tokens`, evicting the least recently used as needed.
    pub fn insert(&mut self, tokens: Vec<u32>, lane: L) {
        if tokens.is_empty() || !tokens.len().is_multiple_of(self.block) || tokens.len() > self.budget {
            return;
        }
        self.clock += 1;
        let key = extend_hash(FNV_OFFSET, &tokens);
        if let Some(old) = self.entries.insert(key, Entry { tokens, lane, last_used: self.clock }) {
            self.used -= old.tokens.len();
        }
        self.used += self.entries[&key].tokens.len();
        while self.used > self.budget {
            let oldest = *self.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k).expect("over budget");
            let gone = self.entries.remove(&oldest).expect("listed");
            self.used -= gone.tokens.len();
        }
    }

    /// Tokens held in all snapshots.
    pub fn used_tokens(&self) -> usize {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_block_aligned_prefix_wins_and_one_token_is_left() {
        let mut c = PrefixCache::new(4, 100);
        let p: Vec<u32> = (0..20).collect();
        c.insert(p[..4].to_vec(), "four");
        c.insert(p[..12].to_vec(), "twelve");
        c.insert(p[..16].to_vec(), "sixteen");
        assert_eq!(c.lookup(&p[..17]).map(|(n, l)| (n, *l)), Some((16, "sixteen")));
        assert_eq!(c.lookup(&p[..16]).map(|(n, l)| (n, *l)), Some((12, "twelve")), "a whole-prompt hit leaves a row");
        let mut other = p.clone();
        other[5] = 99;
        assert_eq!(c.lookup(&other).map(|(n, l)| (n, *l)), Some((4, "four")));
        assert_eq!(c.snapshot_point(17), Some(16));
        assert_eq!(c.snapshot_point(16), Some(12));
        assert_eq!(c.snapshot_point(4), None);
    }

    #[test]
    fn the_budget_evicts_least_recently_used() {
        let mut c = PrefixCache::new(2, 6);
        c.insert(vec![1, 2], 'a');
        c.insert(vec![3, 4], 'b');
        c.insert(vec![5, 6], 'c');
        assert!(c.lookup(&[1, 2, 9]).is_some());
        c.insert(vec![7, 8], 'd');
        assert!(c.contains(&[1, 2]) && !c.contains(&[3, 4]) && c.contains(&[7, 8]));
        assert_eq!(c.used_tokens(), 6);
        c.insert(vec![1, 2, 3, 4, 5, 6, 7, 8], 'e');
        assert!(!c.contains(&[1, 2, 3, 4, 5, 6, 7, 8]), "larger than the budget: not kept");
        assert!(PrefixCache::<char>::new(2, 0).snapshot_point(10).is_none(), "budget 0 is off");
    }
}
