//! `tf inspect`: what a checkpoint holds, tensor by tensor, with totals per dtype.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use tf_core::{Checkpoint, Result};

/// Human-readable byte count (binary units).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.2} {}", UNITS[u]) }
}

/// The inspection report of a checkpoint directory, index file or single shard.
pub fn report(path: &Path, filter: Option<&str>) -> Result<String> {
    let ck = Checkpoint::open(path)?;
    let mut out = String::new();
    let mut per_dtype: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    let mut total = 0u64;
    let mut shown = 0usize;
    let width = ck.names().map(str::len).max().unwrap_or(4).max(4);
    let _ = writeln!(out, "{:<width$}  {:<8}  {:<20}  {:>12}  shard", "name", "dtype", "shape", "bytes");
    for name in ck.names() {
        if filter.is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let (shard, e) = ck.entry(name).expect("names come from the checkpoint");
        let shard = shard.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let shape = format!("{:?}", e.shape);
        let _ = writeln!(out, "{name:<width$}  {:<8}  {shape:<20}  {:>12}  {shard}", e.dtype.to_string(), e.len);
        let slot = per_dtype.entry(e.dtype.to_string()).or_default();
        slot.0 += 1;
        slot.1 += e.len as u64;
        total += e.len as u64;
        shown += 1;
    }
    let _ = writeln!(out);
    for (dtype, (count, bytes)) in &per_dtype {
        let _ = writeln!(out, "{dtype:<8}  {count:>7} tensors  {:>12}", human_bytes(*bytes));
    }
    let shards = ck.shards().len();
    let _ = writeln!(
        out,
        "total     {shown:>7} tensors  {:>12}  in {shards} shard(s) at {}",
        human_bytes(total),
        path.display()
    );
    Ok(out)
}
