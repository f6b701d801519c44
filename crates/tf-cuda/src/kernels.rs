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

/// `act_quant_fp8`: bf16 rows to FP8 E4M3 codes with power-of-two scales per 32, bit-exact to the CPU.
pub const ACT_QUANT: KernelSource = KernelSource { name: "act_quant", source: include_str!("../kernels/act_quant.cu") };

/// `fp8_gemv`: block-scaled FP8 weights times 1..8 quantized activation rows, in the CPU reference's order.
pub const FP8_GEMV: KernelSource = KernelSource { name: "fp8_gemv", source: include_str!("../kernels/fp8_gemv.cu") };

/// `rmsnorm_bf16`: RMSNorm of bf16 rows, one block per row.
pub const RMSNORM: KernelSource = KernelSource { name: "rmsnorm", source: include_str!("../kernels/rmsnorm.cu") };

/// Every kernel source, in file-name order.
pub const ALL: [KernelSource; 3] = [ACT_QUANT, FP8_GEMV, RMSNORM];
