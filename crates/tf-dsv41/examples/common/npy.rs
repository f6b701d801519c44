//! The held-out streams data_mix.py writes, read by the gate examples.
use std::path::Path;

/// A 1-D little-endian u32 `.npy` (what data_mix.py writes), read without a numpy crate for two examples.
pub fn read_u32(path: &Path) -> Vec<u32> {
    let raw = std::fs::read(path).expect("held-out .npy reads");
    assert!(raw.starts_with(b"\x93NUMPY"), "{}: not a .npy file", path.display());
    let (len_at, hdr_at) = if raw[6] == 1 { (8, 10) } else { (8, 12) };
    let hlen = if raw[6] == 1 {
        u16::from_le_bytes([raw[len_at], raw[len_at + 1]]) as usize
    } else {
        u32::from_le_bytes(raw[len_at..len_at + 4].try_into().unwrap()) as usize
    };
    let header = std::str::from_utf8(&raw[hdr_at..hdr_at + hlen]).expect("npy header is text");
    assert!(header.contains("'<u4'") && !header.contains("True"), "{}: want a 1-D '<u4' array", path.display());
    raw[hdr_at + hlen..].chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect()
}
