//! `route`, `swiglu`, `moe_combine`: the MoE (dsv41 §9) around its GEMVs, as `crate::moe` computes it.

use super::{In, Out, bytes, grid, grid1, int, need};
use crate::cuda::kernels::MOE;
use cudarc::driver::PushKernelArg;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// `ROUTE_THREADS` in `kernels/moe.cu`: its loops stride by this.
const ROUTE_THREADS: u32 = 256;
/// Threads per block of the column kernels.
const THREADS: usize = 256;
/// Shared memory a block may take without opting in; route keeps 2·experts + topk words there.
const SMEM_LIMIT: usize = 48 << 10;

fn bad(op: &'static str, what: String) -> Error {
    Error::Launch { op, what }
}

/// Blocks along a row of `n` columns, within the grid's y limit.
fn column_blocks(op: &'static str, n: usize) -> Result<usize, Error> {
    let blocks = n.div_ceil(THREADS);
    if blocks == 0 || blocks > 65535 {
        return Err(bad(op, format!("{n} columns need {blocks} column blocks, not 1..=65535")));
    }
    Ok(blocks)
}

/// moe::route per row: ids i32 [rows, topk] in the CPU's order (biased score desc, lower id first on ties), weights f32 [rows, topk].
#[allow(clippy::too_many_arguments)]
pub fn route(
    gpu: &Gpu,
    logits: &In<'_>,
    bias: &In<'_>,
    ids: &mut Out<'_>,
    weights: &mut Out<'_>,
    (rows, experts, topk): (usize, usize, usize),
    norm_topk: bool,
    route_scale: f32,
) -> Result<(), Error> {
    const OP: &str = "route";
    if topk == 0 || topk > experts {
        return Err(bad(OP, format!("top-{topk} of {experts} experts: needs 1 ≤ topk ≤ experts")));
    }
    let smem = bytes(OP, &[2 * experts + topk, 4])?;
    if smem > SMEM_LIMIT {
        return Err(bad(OP, format!("{experts} experts need {smem} bytes of shared memory, over {SMEM_LIMIT}")));
    }
    need(OP, "logits", logits.len(), bytes(OP, &[rows, experts, 4])?)?;
    need(OP, "bias", bias.len(), bytes(OP, &[experts, 4])?)?;
    need(OP, "ids", ids.len(), bytes(OP, &[rows, topk, 4])?)?;
    need(OP, "weights", weights.len(), bytes(OP, &[rows, topk, 4])?)?;
    if rows == 0 {
        return Ok(());
    }
    int(OP, "rows", rows)?;
    let (experts_i, topk_i, norm_i) = (int(OP, "experts", experts)?, int(OP, "topk", topk)?, i32::from(norm_topk));
    let f = gpu.function(&MOE.spec(&[]), "moe_route")?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(logits).arg(bias).arg(ids).arg(weights).arg(&experts_i).arg(&topk_i).arg(&norm_i).arg(&route_scale);
    // SAFETY: arguments match `moe_route(const f32*, const f32*, int*, f32*, int, int, int, float)`; sizes checked above.
    unsafe { launch.launch(grid((rows, 1), ROUTE_THREADS, smem)) }
        .doing(|| format!("launching {OP} on {rows} rows"))?;
    Ok(())
}

/// moe::swiglu: g, u f32 [pairs, inter] are GEMV outputs, first rounded to bf16 (the CPU's linears return bf16), then silu(min(g,L))·clamp(u,±L) (limit>0), times weights[p] if given, bf16 out.
pub fn swiglu(
    gpu: &Gpu,
    g: &In<'_>,
    u: &In<'_>,
    weights: Option<&In<'_>>,
    out: &mut Out<'_>,
    (pairs, inter): (usize, usize),
    limit: f32,
) -> Result<(), Error> {
    const OP: &str = "swiglu";
    let blocks = column_blocks(OP, inter)?;
    need(OP, "g", g.len(), bytes(OP, &[pairs, inter, 4])?)?;
    need(OP, "u", u.len(), bytes(OP, &[pairs, inter, 4])?)?;
    if let Some(w) = weights {
        need(OP, "weights", w.len(), bytes(OP, &[pairs, 4])?)?;
    }
    need(OP, "out", out.len(), bytes(OP, &[pairs, inter, 2])?)?;
    if pairs == 0 {
        return Ok(());
    }
    int(OP, "pairs", pairs)?;
    let (inter_i, has_w) = (int(OP, "inter", inter)?, i32::from(weights.is_some()));
    let f = gpu.function(&MOE.spec(&[]), "moe_swiglu")?;
    let mut launch = gpu.stream().launch_builder(&f);
    // Without weights the kernel never reads its weights pointer; `g` stands in as a valid one.
    launch.arg(g).arg(u).arg(weights.unwrap_or(g)).arg(out).arg(&inter_i).arg(&has_w).arg(&limit);
    // SAFETY: arguments match `moe_swiglu(const f32*, const f32*, const f32*, u16*, int, int, float)`; sizes checked above.
    unsafe { launch.launch(grid((pairs, blocks), THREADS as u32, 0)) }
        .doing(|| format!("launching {OP} on {pairs} pairs"))?;
    Ok(())
}

/// y bf16 [rows, dim] = bf16( Σ over the row's experts in ASCENDING id order of bf16(down[r·topk+i]) (f32 adds, starting from 0.0) + bf16(shared[r]) ), as Moe::forward accumulates.
pub fn moe_combine(
    gpu: &Gpu,
    down: &In<'_>,
    ids: &In<'_>,
    shared: &In<'_>,
    y: &mut Out<'_>,
    (rows, topk, dim): (usize, usize, usize),
) -> Result<(), Error> {
    need("moe_combine", "down", down.len(), bytes("moe_combine", &[rows, topk, dim, 4])?)?;
    need("moe_combine", "shared", shared.len(), bytes("moe_combine", &[rows, dim, 4])?)?;
    combine(gpu, (down, shared), ids, y, (rows, topk, dim), (topk, dim))
}

/// [`moe_combine`] where `down` holds topk + 1 pairs per row, the last the shared expert's (`moe_with_shared`'s layout).
pub fn moe_combine_joined(
    gpu: &Gpu,
    down: &In<'_>,
    ids: &In<'_>,
    y: &mut Out<'_>,
    (rows, topk, dim): (usize, usize, usize),
) -> Result<(), Error> {
    need("moe_combine", "down", down.len(), bytes("moe_combine", &[rows, topk + 1, dim, 4])?)?;
    if rows == 0 {
        return combine(gpu, (down, down), ids, y, (rows, topk, dim), (topk + 1, 0));
    }
    let shared = down.slice(topk * dim * 4..);
    combine(gpu, (down, &shared), ids, y, (rows, topk, dim), (topk + 1, (topk + 1) * dim))
}

/// moe_combine's launch: `stride` pairs per row of `down`, shared rows `shared_stride` floats apart (callers checked both).
fn combine(
    gpu: &Gpu,
    (down, shared): (&In<'_>, &In<'_>),
    ids: &In<'_>,
    y: &mut Out<'_>,
    (rows, topk, dim): (usize, usize, usize),
    (stride, shared_stride): (usize, usize),
) -> Result<(), Error> {
    const OP: &str = "moe_combine";
    if topk == 0 {
        return Err(bad(OP, "top-0: every row needs at least one expert".into()));
    }
    let blocks = column_blocks(OP, dim)?;
    let smem = bytes(OP, &[topk, 4])?;
    if smem > SMEM_LIMIT {
        return Err(bad(OP, format!("top-{topk} needs {smem} bytes of shared memory, over {SMEM_LIMIT}")));
    }
    need(OP, "ids", ids.len(), bytes(OP, &[rows, topk, 4])?)?;
    need(OP, "y", y.len(), bytes(OP, &[rows, dim, 2])?)?;
    if rows == 0 {
        return Ok(());
    }
    int(OP, "rows", rows)?;
    let (topk_i, dim_i) = (int(OP, "topk", topk)?, int(OP, "dim", dim)?);
    let (stride_i, shared_i) = (int(OP, "stride", stride)?, int(OP, "shared stride", shared_stride)?);
    let f = gpu.function(&MOE.spec(&[]), OP)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(down).arg(ids).arg(shared).arg(y).arg(&topk_i).arg(&dim_i).arg(&stride_i).arg(&shared_i);
    // SAFETY: arguments match `moe_combine(const f32*, const int*, const f32*, u16*, int, int, int, int)`; sizes checked by callers and above.
    unsafe { launch.launch(grid((rows, blocks), THREADS as u32, smem)) }
        .doing(|| format!("launching {OP} on {rows} rows"))?;
    Ok(())
}

/// ids2/weights2 `[rows, topk + 1]`: each row's picks, then `shared` with weight 1, for routed launches that carry the shared expert.
pub fn moe_with_shared(
    gpu: &Gpu,
    (ids, weights): (&In<'_>, &In<'_>),
    (ids2, weights2): (&mut Out<'_>, &mut Out<'_>),
    (rows, topk, shared): (usize, usize, usize),
) -> Result<(), Error> {
    const OP: &str = "moe_with_shared";
    need(OP, "ids", ids.len(), bytes(OP, &[rows, topk, 4])?)?;
    need(OP, "weights", weights.len(), bytes(OP, &[rows, topk, 4])?)?;
    need(OP, "ids2", ids2.len(), bytes(OP, &[rows, topk + 1, 4])?)?;
    need(OP, "weights2", weights2.len(), bytes(OP, &[rows, topk + 1, 4])?)?;
    if rows == 0 {
        return Ok(());
    }
    int(OP, "rows", rows)?;
    let (topk_i, shared_i) = (int(OP, "topk", topk)?, int(OP, "shared", shared)?);
    let f = gpu.function(&MOE.spec(&[]), OP)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(ids).arg(weights).arg(ids2).arg(weights2).arg(&topk_i).arg(&shared_i);
    // SAFETY: arguments match `moe_with_shared(const int*, const float*, int*, float*, int, int)`; sizes checked above.
    unsafe { launch.launch(grid1(rows, 32)) }.doing(|| format!("launching {OP} on {rows} rows"))?;
    Ok(())
}
