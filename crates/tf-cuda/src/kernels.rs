//! Our CUDA sources, embedded at build time; `tests/compile_kernels.rs` checks this lists every `kernels/*.cu`.

use crate::KernelSpec;

/// One `.cu` file of `crates/tf-cuda/kernels`.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    pub name: &'static str,
    pub source: &'static str,
}

impl KernelSource {
    /// This source specialized by `defines` (`-DKEY=VALUE`).
    pub fn spec(&self, defines: &[(&str, &str)]) -> KernelSpec<'static> {
        let defines = defines.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        KernelSpec { name: self.name, source: self.source, defines }
    }
}

/// `rmsnorm_bf16`: RMSNorm of bf16 rows, one block per row.
pub const RMSNORM: KernelSource = KernelSource { name: "rmsnorm", source: include_str!("../kernels/rmsnorm.cu") };

/// Every kernel source, in file-name order.
pub const ALL: [KernelSource; 1] = [RMSNORM];
