//! `dense`: x·Wᵀ of the bf16/f32 linears (router, compressor, indexer, grouped wo_a), f32 sums in a fixed order.

use super::{In, Out, bytes, grid, int, need};
use crate::cuda::kernels::{DENSE, MHC};
use cudarc::driver::{DevicePtr, PushKernelArg};
use tf_core::ops::SumOrder;
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
    launch(gpu, (x, x_io), (w, w_io), (y, y_io), None, (rows, n, k), groups, order).map(|_| ())
}

/// `dense` of one group that also writes ss[r] = Σ_i x[r, i]² in index order (mHC's RMS scale) from the same staged x; false when the shape took the untiled path and ss is left unwritten.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dense_squares(
    gpu: &Gpu,
    x: (&In<'_>, Io),
    w: (&In<'_>, Io),
    y: (&mut Out<'_>, Io),
    (ss, sums): (&mut Out<'_>, SumOrder),
    (rows, n, k): (usize, usize, usize),
    order: Sum,
) -> Result<bool, Error> {
    need("dense", "ss", ss.len(), bytes("dense", &[rows, 4])?)?;
    launch(gpu, x, w, y, Some((ss, sums)), (rows, n, k), 1, order)
}

/// Tiled calls of at most this many output blocks (mHC mixes, router) give each row of a short window its own block: the one-row build's sums, same bits.
const SPREAD_BLOCKS: usize = 32;

/// Threads per block of the tiled path (kernels/dense.cu TILE_THREADS): a block owns TILE_THREADS / lanes outputs.
const TILE_THREADS: usize = 128;

/// Every define set `dense` compiles kernels/dense.cu with: (DENSE_ROWS, TILE_LANES), TILE_LANES 0 being the untiled path.
pub const DENSE_VARIANTS: [(usize, usize); 5] = [(8, 0), (1, 1), (8, 1), (1, 8), (8, 8)];

/// The defines of one `DENSE_VARIANTS` entry.
pub fn dense_defines((rows, lanes): (usize, usize)) -> [(&'static str, String); 2] {
    [("DENSE_ROWS", rows.to_string()), ("TILE_LANES", lanes.to_string())]
}

/// Whether the view starts on a 16-byte boundary (pool buffers do; a view into a packed weight may not).
pub(crate) fn aligned16(gpu: &Gpu, v: &In<'_>) -> bool {
    let (ptr, _sync) = v.device_ptr(gpu.stream());
    ptr.is_multiple_of(16)
}

/// Outputs up to which `dots_bf16` runs (the router's 384); the head's 129,280 stay on the tiled path, already at copy speed.
const DOT_OUTPUTS: usize = 1024;

#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &Gpu,
    (x, x_io): (&In<'_>, Io),
    (w, w_io): (&In<'_>, Io),
    (y, y_io): (&mut Out<'_>, Io),
    ss: Option<(&mut Out<'_>, SumOrder)>,
    (rows, n, k): (usize, usize, usize),
    groups: usize,
    order: Sum,
) -> Result<bool, Error> {
    const OP: &str = "dense";
    if groups == 0 || !n.is_multiple_of(groups) {
        return Err(Error::Launch { op: OP, what: format!("{n} outputs do not split into {groups} groups") });
    }
    need(OP, "x", x.len(), bytes(OP, &[rows, groups, k, x_io.width()])?)?;
    need(OP, "w", w.len(), bytes(OP, &[n, k, w_io.width()])?)?;
    need(OP, "y", y.len(), bytes(OP, &[rows, n, y_io.width()])?)?;
    if rows == 0 || n == 0 {
        return Ok(true);
    }
    // Few bf16 outputs of f32 in Lanes8 order (the router): a block per output and row, the same sums.
    let dots = (x_io, w_io, y_io, order, groups) == (Io::Bf16, Io::Bf16, Io::F32, Sum::Lanes8, 1)
        && ss.is_none()
        && rows <= ROWS
        && n <= DOT_OUTPUTS
        && k.is_multiple_of(4)
        && aligned16(gpu, x)
        && aligned16(gpu, w);
    if dots {
        let f = gpu.function(&MHC.spec(&[]), "dots_bf16")?;
        let (n_i, k_i) = (int(OP, "n", n)?, int(OP, "k", k)?);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(x).arg(w).arg(y).arg(&n_i).arg(&k_i);
        // SAFETY: arguments match `dots_bf16(const u16*, const u16*, f32*, int, int)`; sizes and alignment checked.
        unsafe { launch.launch(grid((n, rows), super::mhc::DOT_THREADS, 0)) }
            .doing(|| format!("launching dots_bf16 on {rows} rows × {n} outputs × {k}"))?;
        return Ok(false);
    }
    let lanes = if order == Sum::Lanes8 { 8 } else { 1 };
    // The tiled path stages one group's x per block in 16-byte loads: no block straddles two groups, rows are whole vectors.
    let outs = TILE_THREADS / lanes;
    let tiled = (groups == 1 || (n / groups).is_multiple_of(outs))
        && k.is_multiple_of(8)
        && aligned16(gpu, x)
        && aligned16(gpu, w);
    // A lone decode row gets a one-row build, so no adds are predicated off for rows that are not there.
    let spread = tiled && rows <= ROWS && n.div_ceil(outs) + usize::from(ss.is_some()) <= SPREAD_BLOCKS;
    let per_block = if tiled && (rows == 1 || spread) { 1 } else { ROWS };
    let (blocks, threads) = if tiled {
        ((n.div_ceil(outs) + usize::from(ss.is_some()), rows.div_ceil(per_block)), TILE_THREADS)
    } else {
        ((bytes(OP, &[n, lanes])?.div_ceil(THREADS), rows.div_ceil(per_block)), THREADS)
    };
    if blocks.1 > 65535 {
        return Err(Error::Launch { op: OP, what: format!("{rows} rows exceed one launch's {} rows", 65535 * ROWS) });
    }
    let variant = (per_block, if tiled { lanes } else { 0 });
    if !DENSE_VARIANTS.contains(&variant) {
        return Err(Error::Launch { op: OP, what: format!("no compile-tested dense build for {variant:?}") });
    }
    let [(rk, rv), (lk, lv)] = dense_defines(variant);
    let name = format!("dense_x{}_w{}_y{}", x_io.tag(), w_io.tag(), y_io.tag());
    let f = gpu.function(&DENSE.spec(&[(rk, &rv), (lk, &lv)]), &name)?;
    let args = [int(OP, "rows", rows)?, int(OP, "n", n)?, int(OP, "k", k)?, int(OP, "groups", groups)?, lanes as i32];
    let null = 0u64;
    let wide = i32::from(matches!(ss, Some((_, SumOrder::Lanes32))));
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(w).arg(y);
    match ss {
        Some((ss, _)) if tiled => launch.arg(ss),
        _ => launch.arg(&null),
    };
    for a in &args {
        launch.arg(a);
    }
    launch.arg(&wide);
    // SAFETY: arguments match `dense_x?_w?_y?(const X*, const W*, Y*, float* ss, int rows, int n, int k, int groups, int lanes, int wide)`; sizes checked.
    unsafe { launch.launch(grid(blocks, threads as u32, 0)) }
        .doing(|| format!("launching {name} on {rows} rows × {n} outputs × {k}"))?;
    Ok(tiled)
}
