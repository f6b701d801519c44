//! Cache keys for compiled kernels: a module is reused only for the same source, target and specialization.

use crate::Arch;
use std::path::{Path, PathBuf};

/// One kernel module to compile: our own CUDA source plus the defines that specialize it.
#[derive(Clone, Debug)]
pub struct KernelSpec<'a> {
    pub name: &'a str,
    pub source: &'a str,
    pub defines: Vec<(String, String)>,
}

/// FNV-1a 64: stable across runs, platforms and Rust versions, unlike `DefaultHasher`.
fn fnv1a(bytes: impl IntoIterator<Item = u8>, mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// Hex key of (source, target, sorted defines, compiler version); any change gives a new key.
pub fn cache_key(spec: &KernelSpec<'_>, arch: Arch, compiler: &str) -> String {
    let mut defines = spec.defines.clone();
    defines.sort();
    let mut h = fnv1a(spec.source.bytes(), 0xCBF2_9CE4_8422_2325);
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
