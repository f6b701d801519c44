//! Launchers of the dsv41 kernels: each checks shapes and buffer sizes, then queues its launches on the GPU's stream.

mod attn;
mod convert;
mod dense;
mod engram;
mod fakequant;
mod index;
mod mhc;
mod moe;
mod norm;
mod rope;
mod rows;

pub use attn::{
    AttnPath, KEY_NONE, KeyRows, KeySource, LaneKeys, compress_pool, key_id, sparse_attn, sparse_attn_rows,
};
pub use convert::{exp_ln_1p, f32_to_bf16};
pub use dense::{DENSE_VARIANTS, Io, Sum, dense, dense_defines};
pub use engram::engram_gate;
pub use fakequant::{qdq_fp4, qdq_fp8_pow2};
pub use index::{
    Candidates, LaneMask, RowCandidates, ScoreLane, SelectLane, index_scores, index_scores_rows, index_select,
    index_select_rows,
};
pub use mhc::{Sinkhorn, hc_mean, hc_mixes, hc_post, hc_pre, hc_pre_norm};
pub use moe::{moe_combine, moe_combine_joined, moe_with_shared, route, swiglu};
pub use norm::{Codes, rms_norm};
pub use rope::{rope, rope_table};
pub use rows::{argmax_sum, embed_rows, scatter_rows, scatter_rows_into};

use cudarc::driver::{CudaView, CudaViewMut};
use tf_cuda::Error;

/// A device input: a byte view of a pooled buffer, a weight or a part of one.
pub type In<'a> = CudaView<'a, u8>;
/// A device output, written by the launch.
pub type Out<'a> = CudaViewMut<'a, u8>;

/// `a × b × …` in bytes, or an error naming the op when it overflows.
pub(crate) fn bytes(op: &'static str, dims: &[usize]) -> Result<usize, Error> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::Launch { op, what: format!("{dims:?} overflows") })
}

pub(crate) use tf_cuda::launch::{as_i32 as int, check_bytes as need, grid, grid1, strided};
