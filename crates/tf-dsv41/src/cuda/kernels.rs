//! This crate's CUDA sources, each after `kernels/common.cuh`, embedded at build time; `tests/compile_kernels.rs` checks the list is `kernels/*.cu`.

use tf_cuda::KernelSource;

/// `sparse_attn`: single-KV-head attention over listed key ids with a sink, in `attn::sparse::attend`'s order.
pub const ATTN: KernelSource =
    KernelSource::new("attn", concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/attn.cu")));

/// `compress_pool`: the compressor's gate-softmax pooling of a group's rows, as `attn::pool`.
pub const COMPRESS: KernelSource = KernelSource::new(
    "compress",
    concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/compress.cu")),
);

/// `f32_to_bf16`: activations to bf16.
pub const CONVERT: KernelSource = KernelSource::new(
    "convert",
    concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/convert.cu")),
);

/// `dense_x?_w?_y?`: the bf16/f32 linears.
pub const DENSE: KernelSource = KernelSource::new(
    "dense",
    concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/dense.cu")),
);

/// `engram_gate`: the Engram gate on the streams after `wkv`.
pub const ENGRAM: KernelSource = KernelSource::new(
    "engram",
    concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/engram.cu")),
);

/// `qdq_fp8_pow2`, `qdq_fp4`: the fake-quant points.
pub const FAKEQUANT: KernelSource = KernelSource::new(
    "fakequant",
    concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/fakequant.cu")),
);

/// `index_scores`, `index_select`: the lightning indexer's scores, candidate mask and top-k, as `attn::index`.
pub const INDEX: KernelSource = KernelSource::new(
    "index",
    concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/index.cu")),
);

/// `hc_sinkhorn`, `hc_pre`, `hc_post`: an mHC site's mixes (after `dense`), collapse and expand.
pub const MHC: KernelSource =
    KernelSource::new("mhc", concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/mhc.cu")));

/// `moe_route`, `moe_swiglu`, `moe_combine`: the MoE around its GEMVs.
pub const MOE: KernelSource =
    KernelSource::new("moe", concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/moe.cu")));

/// `rope`: RoPE and its inverse in place.
pub const ROPE: KernelSource =
    KernelSource::new("rope", concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/rope.cu")));

/// `rms_norm_seq`: RMSNorm in the CPU's summation order.
pub const NORM: KernelSource = KernelSource::new(
    "norm",
    concat!(
        include_str!("../../kernels/common.cuh"),
        include_str!("../../../tf-cuda/kernels/fp8_quant.cuh"),
        include_str!("../../kernels/norm.cu")
    ),
);

/// `embed_rows`, `scatter_rows`: the embedding gather and ring-slot scatters.
pub const ROWS: KernelSource =
    KernelSource::new("rows", concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/rows.cu")));

/// `synth_bytes`, `synth_uniform`: the flash-shaped bench model's weights, generated in place.
pub const SYNTH: KernelSource = KernelSource::new(
    "synth",
    concat!(include_str!("../../kernels/common.cuh"), include_str!("../../kernels/synth.cu")),
);

/// Every kernel source of this crate, in file-name order.
pub const KERNELS: [KernelSource; 13] =
    [ATTN, COMPRESS, CONVERT, DENSE, ENGRAM, FAKEQUANT, INDEX, MHC, MOE, NORM, ROPE, ROWS, SYNTH];
