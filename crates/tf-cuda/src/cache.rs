//! The on-disk kernel cache: a module is reused only for the same source, target, specialization and compiler.

use crate::Arch;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// One kernel module to compile: our own CUDA source plus the defines that specialize it.
#[derive(Clone, Debug)]
pub struct KernelSpec<'a> {
    pub name: &'a str,
    pub source: &'a str,
    pub defines: Vec<(String, String)>,
    source_hash: u64,
}

impl<'a> KernelSpec<'a> {
    /// A spec whose source is hashed here; embedded sources use `KernelSource::spec`, hashed at compile time.
    pub fn new(name: &'a str, source: &'a str, defines: Vec<(String, String)>) -> KernelSpec<'a> {
        KernelSpec { name, source, defines, source_hash: source_hash(source) }
    }

    pub(crate) fn with_hash(name: &'a str, source: &'a str, defines: Vec<(String, String)>, hash: u64) -> Self {
        KernelSpec { name, source, defines, source_hash: hash }
    }

    /// [`source_hash`] of the source.
    pub fn source_hash(&self) -> u64 {
        self.source_hash
    }
}

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;

/// FNV-1a 64 of a source, a `const fn` so embedded kernels are hashed at compile time and a launch never rehashes one.
pub const fn source_hash(source: &str) -> u64 {
    let b = source.as_bytes();
    let (mut h, mut i) = (FNV_OFFSET, 0);
    while i < b.len() {
        h = (h ^ b[i] as u64).wrapping_mul(FNV_PRIME);
        i += 1;
    }
    h
}

/// FNV-1a 64: stable across runs, platforms and Rust versions, unlike `DefaultHasher`.
fn fnv1a(bytes: impl IntoIterator<Item = u8>, mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// Hex key of (source, target, sorted defines, compiler version); any change gives a new key.
pub fn cache_key(spec: &KernelSpec<'_>, arch: Arch, compiler: &str) -> String {
    let mut defines = spec.defines.clone();
    defines.sort();
    let mut h = spec.source_hash;
    for part in
        [arch.to_string(), compiler.to_string()].into_iter().chain(defines.iter().map(|(k, v)| format!("{k}={v}")))
    {
        h = fnv1a(part.bytes().chain([0u8]), h);
    }
    format!("{}-{arch}-{h:016x}", spec.name)
}

/// Where a compiled module lives under a cache directory.
pub fn cache_path(dir: &Path, spec: &KernelSpec<'_>, arch: Arch, compiler: &str) -> PathBuf {
    dir.join(format!("{}.cubin", cache_key(spec, arch, compiler)))
}

/// The kernel cache: `$TF_CACHE_DIR/kernels`, else `~/.cache/tensorfold/kernels` (beside the default model).
pub fn default_cache_dir() -> PathBuf {
    tf_core::cache_dir().join("kernels")
}

/// Writes `bytes` to a unique temporary file beside `path`, then renames it: readers see all or nothing.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{seq}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path)).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}
