//! This crate's CUDA sources, embedded at build time; `tests/compile_kernels.rs` checks the list is `kernels/*.cu`.

use tf_cuda::KernelSource;

/// `embed_rows`, `scatter_rows`: the embedding gather and ring-slot scatters.
pub const ROWS: KernelSource = KernelSource { name: "rows", source: include_str!("../../kernels/rows.cu") };

/// Every kernel source of this crate, in file-name order.
pub const KERNELS: [KernelSource; 1] = [ROWS];
