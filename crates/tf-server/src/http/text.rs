//! Stop strings while streaming: text that could still become a stop string is held back until decided.

/// Holds back the tail of the text that could still become a stop string.
#[derive(Clone, Debug, Default)]
pub struct StopScan {
    stops: Vec<String>,
    pending: String,
    hit: bool,
    after: String,
}

impl StopScan {
    pub fn new(stops: Vec<String>) -> StopScan {
        StopScan { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), ..StopScan::default() }
    }

    /// True once a stop string was seen; everything after it is dropped.
    pub fn hit(&self) -> bool {
        self.hit
    }

    /// Adds new text; returns what can be released now (text before any stop string, minus a possible stop prefix).
    pub fn push(&mut self, text: &str) -> String {
        if self.hit {
            return String::new();
        }
        self.pending.push_str(text);
        let found = self.stops.iter().filter_map(|s| self.pending.find(s.as_str()).map(|at| (at, s.len()))).min();
        if let Some((at, len)) = found {
            self.hit = true;
            let out = self.pending[..at].to_string();
            self.after = self.pending[at + len..].to_string();
            self.pending.clear();
            return out;
        }
        let keep = self.stops.iter().map(|s| longest_suffix_prefix(&self.pending, s)).max().unwrap_or(0);
        let cut = self.pending.len() - keep;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        out
    }

    /// Text that arrived after the stop string (taken once).
    pub fn take_after(&mut self) -> String {
        std::mem::take(&mut self.after)
    }

    /// Releases whatever was held back once generation ended without a stop string.
    pub fn finish(&mut self) -> String {
        if self.hit { String::new() } else { std::mem::take(&mut self.pending) }
    }
}

/// Bytes at the end of `text` that are a proper prefix of `stop`, on a char boundary.
fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && stop.is_char_boundary(n) && text.ends_with(&stop[..n]))
        .unwrap_or(0)
}
