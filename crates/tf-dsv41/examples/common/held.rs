//! What the gate examples share: their command line, the model (a compact gate model expands first) and a held-out stream.
use std::path::Path;

/// `NAME MODEL_DIR HELDOUT_NPY [A] [B]`: the loaded model, the stream, and the two counts (their defaults when absent).
pub fn open(usage: &str, defaults: (usize, usize)) -> (tf_dsv41::Model, Vec<u32>, usize, usize) {
    let args: Vec<String> = std::env::args().collect();
    assert!((3..=5).contains(&args.len()), "usage: {usage}");
    let count = |i: usize, d: usize| args.get(i).map_or(d, |s| s.parse().unwrap_or_else(|_| panic!("usage: {usage}")));
    let (a, b) = (count(3, defaults.0), count(4, defaults.1));
    let opts = tf_dsv41::Options { replay: false, ..Default::default() };
    let dir = tf_dsv41::gate_model::resolve(Path::new(&args[1])).expect("gate model expands");
    let model = tf_dsv41::Model::load(&dir, opts).expect("model loads");
    (model, read_u32(Path::new(&args[2])), a, b)
}

/// A 1-D little-endian u32 `.npy` (what data_mix.py writes), read without a numpy crate for two examples.
fn read_u32(path: &Path) -> Vec<u32> {
    let raw = std::fs::read(path).expect("held-out .npy reads");
    assert!(raw.starts_with(b"\x93NUMPY"), "{}: not a .npy file", path.display());
    // Version 1 stores the header length in 2 bytes, later versions in 4.
    let (hlen, at) = if raw[6] == 1 {
        (u16::from_le_bytes([raw[8], raw[9]]) as usize, 10)
    } else {
        (u32::from_le_bytes(raw[8..12].try_into().unwrap()) as usize, 12)
    };
    let header = std::str::from_utf8(&raw[at..at + hlen]).expect("npy header is text");
    assert!(header.contains("'<u4'") && !header.contains("True"), "{}: want a 1-D '<u4' array", path.display());
    raw[at + hlen..].chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect()
}
