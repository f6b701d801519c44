//! Our CUDA sources, embedded at build time; `tests/compile_kernels.rs` checks this lists every `kernels/*.cu`.

use crate::KernelSpec;

/// One `.cu` file of `crates/tf-cuda/kernels`.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    pub name: &'static str,
    pub source: &'static str,
    hash: u64,
}

impl KernelSource {
    /// An embedded source, hashed at compile time when used in a `const`.
    pub const fn new(name: &'static str, source: &'static str) -> KernelSource {
        KernelSource { name, source, hash: crate::cache::source_hash(source) }
    }

    /// This source specialized by `defines` (`-DKEY=VALUE`).
    pub fn spec(&self, defines: &[(&str, &str)]) -> KernelSpec<'static> {
        let defines = defines.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        KernelSpec::with_hash(self.name, self.source, defines, self.hash)
    }
}

/// `act_quant_fp8`: bf16 rows to FP8 E4M3 codes with power-of-two scales per 32, bit-exact to the CPU (tf-dsv41's norms include the same `fp8_quant.cuh`).
pub const ACT_QUANT: KernelSource = KernelSource::new(
    "act_quant",
    concat!(include_str!("../kernels/fp8_quant.cuh"), include_str!("../kernels/act_quant.cu")),
);

/// `fp8_gemv`: block-scaled FP8 weights times 1..8 quantized activation rows, in the CPU reference's order.
pub const FP8_GEMV: KernelSource = KernelSource::new("fp8_gemv", include_str!("../kernels/fp8_gemv.cu"));

/// `fp8_gemm`: the same sums as `fp8_gemv` for prompt rows, 64 × 64 outputs a block, each weight read once per 64 rows.
pub const FP8_GEMM: KernelSource = KernelSource::new("fp8_gemm", include_str!("../kernels/fp8_gemm.cu"));

/// `rmsnorm_bf16`: RMSNorm of bf16 rows, one block per row.
pub const RMSNORM: KernelSource = KernelSource::new("rmsnorm", include_str!("../kernels/rmsnorm.cu"));

/// Every kernel source, in file-name order.
pub const ALL: [KernelSource; 4] = [ACT_QUANT, FP8_GEMM, FP8_GEMV, RMSNORM];

/// How to get NVRTC where a compile test cannot find it.
pub const INSTALL_HINT: &str = "run scripts/install-nvrtc.sh (CI's .ci/run does) to put the pinned NVRTC in target/nvrtc, or point TF_NVRTC_LIB at a libnvrtc.so.13";

/// Names of the `extern "C" __global__` functions in CUDA source (after any `__launch_bounds__(...)`); empty names skipped.
pub fn entry_names(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for after in source.split("extern \"C\" __global__").skip(1) {
        let mut rest = after.trim_start().strip_prefix("void").unwrap_or(after).trim_start();
        if let Some(bounds) = rest.strip_prefix("__launch_bounds__") {
            rest = bounds.split_once(')').map_or("", |(_, r)| r).trim_start();
        }
        let name: String = rest.chars().take_while(|c| *c == '_' || c.is_ascii_alphanumeric()).collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

/// Stems of the `.cu` files in `dir`, sorted: what a crate's kernel list must match.
pub fn cu_names(dir: &std::path::Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir)? {
        if let Some(stem) = e?.file_name().to_str().and_then(|n| n.strip_suffix(".cu")) {
            names.push(stem.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// One `.function(&K.spec(..), NAME)` call in Rust source: the file, `K` without its path, and the entry it asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Launch {
    file: std::path::PathBuf,
    kernel: String,
    entry: String,
}

/// Every `.function(&K.spec(..), NAME)` under `dir` whose NAME is a string literal or a `const NAME: &str` above it (computed names are skipped), for kernel tests.
fn launched_entries(dir: &std::path::Path) -> std::io::Result<Vec<Launch>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if path.is_dir() {
            out.extend(launched_entries(&path)?);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&path)?;
            for (at, _) in text.match_indices(".function(&") {
                if let Some((kernel, entry)) = launched_entry(&text, at) {
                    out.push(Launch { file: path.clone(), kernel, entry });
                }
            }
        }
    }
    Ok(out)
}

/// The (kernel, entry) of the call at `at`: `.spec(` is matched to its closing parenthesis, then the next argument read.
fn launched_entry(text: &str, at: usize) -> Option<(String, String)> {
    let rest = &text[at + ".function(&".len()..];
    let spec = rest.find(".spec(")?;
    let kernel = rest[..spec].rsplit("::").next()?.to_string();
    let mut depth = 0usize;
    let close = rest[spec + ".spec".len()..].char_indices().find_map(|(i, c)| match c {
        '(' => {
            depth += 1;
            None
        }
        ')' if depth == 1 => Some(i),
        ')' => {
            depth -= 1;
            None
        }
        _ => None,
    })?;
    let arg = rest[spec + ".spec".len() + close + 1..].strip_prefix(", ")?;
    let arg = &arg[..arg.find(')')?];
    if let Some(lit) = arg.strip_prefix('"') {
        return Some((kernel, lit.strip_suffix('"')?.to_string()));
    }
    let decl = format!("const {arg}: &str = \"");
    let start = text[..at].rfind(&decl)? + decl.len();
    Some((kernel, text[start..start + text[start..].find('"')?].to_string()))
}

/// Fails naming each launch under `dir` whose entry its kernel (matched by name, case ignored) does not define; returns how many were checked.
pub fn check_launched_entries(dir: &std::path::Path, kernels: &[KernelSource]) -> usize {
    let launches = launched_entries(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut checked = 0;
    for l in &launches {
        let Some(k) = kernels.iter().find(|k| k.name.eq_ignore_ascii_case(&l.kernel)) else { continue };
        let entries = entry_names(k.source);
        assert!(
            entries.contains(&l.entry),
            "{}: `{}` is not an entry of {}.cu ({entries:?})",
            l.file.display(),
            l.entry,
            k.name
        );
        checked += 1;
    }
    checked
}
