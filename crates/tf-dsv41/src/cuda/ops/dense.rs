//! `dense`: x·Wᵀ of the bf16/f32 linears (router, compressor, indexer, grouped wo_a), f32 sums in a fixed order.

use super::{In, Out, bytes, grid, int, need};
use crate::cuda::kernels::DENSE;
use cudarc::driver::PushKernelArg;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// How an operand is stored in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io {
    /// bf16 bits, widened exactly to f32.
    Bf16,
    /// f32.
    F32,
}

impl Io {
    fn width(self) -> usize {
        match self {
            Io::Bf16 => 2,
            Io::F32 => 4,
        }
    }

    fn tag(self) -> char {
        match self {
            Io::Bf16 => 'b',
            Io::F32 => 'f',
        }
    }
}

/// Threads per block and rows per block tile (kernels/dense.cu DENSE_*).
const THREADS: usize = 256;
const ROWS: usize = 8;

/// The order a dot product sums in, each the CPU's for the same weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sum {
    /// tf_core's `matmul_nt`: eight strided lanes, then a fixed pairwise tree (`Dense::forward_*`, mHC, the head).
    Lanes8,
    /// One running sum in index order (attention's grouped `wo_a`).
    Sequential,
}

/// y[r, g·n/groups + o] = Σ_i x[r, g·k + i] · w[g·n/groups + o, i]: `groups` independent blocks of a grouped linear.
#[allow(clippy::too_many_arguments)]
pub fn dense(
    gpu: &Gpu,
    x: &In<'_>,
    x_io: Io,
    w: &In<'_>,
    w_io: Io,
    y: &mut Out<'_>,
    y_io: Io,
    (rows, n, k): (usize, usize, usize),
    groups: usize,
    order: Sum,
) -> Result<(), Error> {
    const OP: &str = "dense";
    if groups == 0 || !n.is_multiple_of(groups) {
        return Err(Error::Launch { op: OP, what: format!("{n} outputs do not split into {groups} groups") });
    }
    need(OP, "x", x.len(), bytes(OP, &[rows, groups, k, x_io.width()])?)?;
    need(OP, "w", w.len(), bytes(OP, &[n, k, w_io.width()])?)?;
    need(OP, "y", y.len(), bytes(OP, &[rows, n, y_io.width()])?)?;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let lanes = if order == Sum::Lanes8 { 8 } else { 1 };
    let blocks = (bytes(OP, &[n, lanes])?.div_ceil(THREADS), rows.div_ceil(ROWS));
    if blocks.1 > 65535 {
        return Err(Error::Launch { op: OP, what: format!("{rows} rows exceed one launch's {} rows", 65535 * ROWS) });
    }
    let name = format!("dense_x{}_w{}_y{}", x_io.tag(), w_io.tag(), y_io.tag());
    let f = gpu.function(&DENSE.spec(&[]), &name)?;
    let args = [int(OP, "rows", rows)?, int(OP, "n", n)?, int(OP, "k", k)?, int(OP, "groups", groups)?, lanes as i32];
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(w).arg(y);
    for a in &args {
        launch.arg(a);
    }
    // SAFETY: arguments match `dense_x?_w?_y?(const X*, const W*, Y*, int rows, int n, int k, int groups, int lanes)`; sizes checked.
    unsafe { launch.launch(grid(blocks, THREADS as u32, 0)) }
        .doing(|| format!("launching {name} on {rows} rows × {n} outputs × {k}"))?;
    Ok(())
}
