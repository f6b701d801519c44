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

/// Warps per block, outputs per warp team and rows per block tile (kernels/dense.cu DENSE_*).
const WARPS: usize = 8;
const OUTS: usize = 4;
const ROWS: usize = 8;

/// Warps that split one output's K: a function of `k` only, so a row's sums never depend on the batch.
fn slices(k: usize) -> usize {
    match k {
        0..256 => 1,
        256..1024 => 2,
        1024..4096 => 4,
        _ => 8,
    }
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
    let s = slices(k);
    let tiles = groups * (n / groups).div_ceil(OUTS);
    let blocks = (tiles.div_ceil(WARPS / s), rows.div_ceil(ROWS));
    if blocks.1 > 65535 {
        return Err(Error::Launch { op: OP, what: format!("{rows} rows exceed one launch's {} rows", 65535 * ROWS) });
    }
    let name = format!("dense_x{}_w{}_y{}", x_io.tag(), w_io.tag(), y_io.tag());
    let f = gpu.function(&DENSE.spec(&[]), &name)?;
    let args = [int(OP, "rows", rows)?, int(OP, "n", n)?, int(OP, "k", k)?, int(OP, "groups", groups)?, s as i32];
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(w).arg(y);
    for a in &args {
        launch.arg(a);
    }
    // SAFETY: arguments match `dense_x?_w?_y?(const X*, const W*, Y*, int rows, int n, int k, int groups, int slices)`; sizes checked.
    unsafe { launch.launch(grid(blocks, (WARPS * 32) as u32, 0)) }
        .doing(|| format!("launching {name} on {rows} rows × {n} outputs × {k}"))?;
    Ok(())
}
