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

/// `act_quant_fp8`: bf16 rows to FP8 E4M3 codes with power-of-two scales per 32, bit-exact to the CPU.
pub const ACT_QUANT: KernelSource = KernelSource::new("act_quant", include_str!("../kernels/act_quant.cu"));

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
