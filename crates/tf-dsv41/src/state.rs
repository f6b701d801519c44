//! Per-sequence state: window rings, compressor partial groups, compressed KV and index-key caches.

use tf_core::bf16;

/// The last `w` window K=V rows of one layer, by absolute position.
#[derive(Clone, Debug)]
pub struct WindowRing {
    slots: Vec<Option<(usize, Vec<bf16>)>>,
}

impl WindowRing {
    pub fn new(w: usize) -> WindowRing {
        WindowRing { slots: vec![None; w] }
    }

    /// The row stored for `pos`, if the ring still holds it.
    pub fn get(&self, pos: usize) -> Option<&[bf16]> {
        match &self.slots[pos % self.slots.len()] {
            Some((p, row)) if *p == pos => Some(row),
            _ => None,
        }
    }

    /// The row in ring slot `i`, whatever its position.
    pub fn slot(&self, i: usize) -> Option<&[bf16]> {
        self.slots[i].as_ref().map(|(_, r)| r.as_slice())
    }

    pub fn put(&mut self, pos: usize, row: Vec<bf16>) {
        let n = self.slots.len();
        self.slots[pos % n] = Some((pos, row));
    }

    /// What the slot of `pos` holds now, to put back with [`WindowRing::restore`].
    pub fn saved(&self, pos: usize) -> Slot {
        self.slots[pos % self.slots.len()].clone()
    }

    /// Puts a slot of `pos` back as [`WindowRing::saved`] found it.
    pub fn restore(&mut self, pos: usize, slot: Slot) {
        let n = self.slots.len();
        self.slots[pos % n] = slot;
    }
}

/// A KV source's compressed cache: completed groups' latents and index keys, and the open group's inputs.
#[derive(Clone, Debug, Default)]
pub struct CompressedCache {
    /// (kv, gate score) in f32 of the open group's tokens (ratio 2 only).
    pub open: Vec<(Vec<f32>, Vec<f32>)>,
    /// Post-RoPE, FP4-fake-quantized latents, one per completed group.
    pub latents: Vec<Vec<bf16>>,
    /// Post-RoPE, FP4-fake-quantized index keys, one per completed group.
    pub index_k: Vec<Vec<bf16>>,
    /// The (kv, gate) rows fed during an armed verify window, so a rewind can rebuild the open group.
    pub recent: Option<OpenRows>,
}

/// Everything one sequence carries between forward calls.
#[derive(Clone, Debug)]
pub struct SeqState {
    /// Tokens already processed (the next row's position).
    pub pos: usize,
    pub windows: Vec<WindowRing>,
    /// Indexed by layer; `Some` for KV sources.
    pub compressed: Vec<Option<CompressedCache>>,
    /// First position each layer's window may see (the replay start for decoder layers).
    pub window_floor: Vec<usize>,
    /// Reference quirk: the KV source that last published index keys (see `Quirks::stale_index_keys`).
    pub last_key_publisher: Option<usize>,
    /// The last tokens' compressed ids, for Engram n-grams.
    pub engram: Option<tf_engram::NgramHistory>,
    /// Prompt rows waiting for the decoder under bounded replay: the last `window` rows entering layer n/2.
    pub replay: Option<ReplayRows>,
    /// What the last verify window overwrote, until it is rewound or another call starts.
    pub undo: Option<Undo>,
}

/// A ring slot as stored: its position and row.
pub type Slot = Option<(usize, Vec<bf16>)>;

/// The open ratio-2 group's (kv, gate) rows in f32.
pub type OpenRows = Vec<(Vec<f32>, Vec<f32>)>;

/// A verify window's undo record on the CPU: the ring slots, open groups and cache lengths before it.
#[derive(Clone, Debug)]
pub struct Undo {
    pub armed: crate::plan::Armed,
    /// Per layer, the ring slot of each window row before the window wrote it.
    pub slots: Vec<Vec<Slot>>,
    /// Per KV source: the open group, latent count and index-key count before the window.
    pub caches: Vec<Option<(OpenRows, usize, usize)>>,
}

/// Stream state of the newest prompt rows at the encoder/decoder boundary, kept across prefill chunks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayRows {
    pub pos0: usize,
    pub x: Vec<bf16>,
    pub pre: Vec<Vec<f32>>,
    /// Engram ids of these rows, per engram layer.
    pub engram_ids: Vec<Vec<Vec<u64>>>,
}

impl SeqState {
    pub fn new(layers: usize, window: usize, kv_sources: &[usize]) -> SeqState {
        let mut compressed = vec![None; layers];
        for &s in kv_sources {
            compressed[s] = Some(CompressedCache::default());
        }
        SeqState {
            pos: 0,
            windows: (0..layers).map(|_| WindowRing::new(window)).collect(),
            compressed,
            window_floor: vec![0; layers],
            last_key_publisher: None,
            engram: None,
            replay: None,
            undo: None,
        }
    }
}
