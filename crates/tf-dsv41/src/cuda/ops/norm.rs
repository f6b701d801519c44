//! `rms_norm`: RMSNorm of bf16 rows bit-exact to `tf_core::ops::rms_norm_bf16` (its sequential sum of squares).

use super::{In, Out};
use crate::cuda::kernels::NORM;
use crate::linear::Norm;
use tf_core::ops::SumOrder;
use tf_cuda::ops::{RmsNormKernel, rms_norm_rows};
use tf_cuda::{Error, Gpu};

/// Threads that stage and write a row: enough that a 5120-wide row takes one or two loads per thread.
pub(super) const THREADS: u32 = 512;

/// y bf16 [rows, dim] = RMSNorm of x bf16 [rows, dim] with weight w bf16 [dim], by tf-cuda's one RMSNorm launcher.
pub fn rms_norm(
    gpu: &Gpu,
    x: &In<'_>,
    w: &In<'_>,
    y: &mut Out<'_>,
    rows: usize,
    dim: usize,
    norm: Norm,
) -> Result<(), Error> {
    let wide = Some(i32::from(norm.sums == SumOrder::Lanes32));
    let kernel = RmsNormKernel { op: "rms_norm", spec: NORM.spec(&[]), entry: "rms_norm_seq", threads: THREADS, wide };
    rms_norm_rows(gpu, &kernel, x, w, y, rows, dim, norm.eps)
}
