//! `sparse_attn` over listed key ids and the compressor's `compress_pool`, in the CPU reference's order of operations.

use super::{In, Out, bytes, grid, int, need};
use crate::cuda::kernels::{ATTN, COMPRESS};
use cudarc::driver::PushKernelArg;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// An empty slot of a key list: the CPU's `None`, scoring -inf and adding nothing.
pub const KEY_NONE: i32 = -1;

/// Rows a key id can name; the id keeps the source in bits 28.. and the row below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// This call's own KV rows, `[rows, d]`.
    Chunk = 0,
    /// The window ring of earlier positions, `[w, d]`.
    Ring = 1,
    /// The compressed KV latents, `[n, d]`.
    Latent = 2,
}

/// The id of row `row` of `source` in a key list (`row` below 2^28).
pub fn key_id(source: KeySource, row: usize) -> i32 {
    (source as i32) << 28 | row as i32
}

/// The three row sets a key id can point into, all bf16 rows of the attention's head dim.
pub struct KeyRows<'a> {
    pub chunk: &'a In<'a>,
    pub ring: &'a In<'a>,
    pub latents: &'a In<'a>,
}

/// Threads per (row, head) block of `sparse_attn`.
const ATTN_THREADS: u32 = 256;
/// Keys per online-softmax block, as `attn::sparse::BLOCK`.
const BLOCK: usize = crate::attn::sparse::BLOCK;
/// Shared memory a launch may use without opting in.
const SMEM_LIMIT: usize = 48 * 1024;

/// `attn::sparse::attend` per (row, head): q bf16 `[rows, heads, d]` over key ids i32 `window[rows, w] ++ sel[rows, s]`.
#[allow(clippy::too_many_arguments)]
pub fn sparse_attn(
    gpu: &Gpu,
    q: &In<'_>,
    keys: &KeyRows<'_>,
    window: &In<'_>,
    sel: Option<&In<'_>>,
    sink: &In<'_>,
    out: &mut Out<'_>,
    (rows, heads, d, w, s): (usize, usize, usize, usize, usize),
    scale: f32,
) -> Result<(), Error> {
    const OP: &str = "sparse_attn";
    // The kernel bounds-checks ids (chunk < rows, ring < w, latents < the view's rows); a bad id is an empty slot.
    if sel.is_none() && s > 0 {
        return Err(Error::Launch { op: OP, what: format!("s = {s} selected keys but no `sel` buffer") });
    }
    need(OP, "q", q.len(), bytes(OP, &[rows, heads, d, 2])?)?;
    need(OP, "chunk", keys.chunk.len(), bytes(OP, &[rows, d, 2])?)?;
    need(OP, "ring", keys.ring.len(), bytes(OP, &[w, d, 2])?)?;
    need(OP, "window", window.len(), bytes(OP, &[rows, w, 4])?)?;
    if let Some(sel) = sel {
        need(OP, "sel", sel.len(), bytes(OP, &[rows, s, 4])?)?;
    }
    need(OP, "sink", sink.len(), bytes(OP, &[heads, 4])?)?;
    need(OP, "out", out.len(), bytes(OP, &[rows, heads, d, 2])?)?;
    if rows == 0 || heads == 0 || d == 0 {
        return Ok(());
    }
    let latent_rows = keys.latents.len() / bytes(OP, &[d, 2])?;
    let list = w.checked_add(s).ok_or_else(|| Error::Launch { op: OP, what: format!("w + s = {w} + {s}") })?;
    let smem = bytes(OP, &[list, 12])? + bytes(OP, &[d, 4])? + bytes(OP, &[list.div_ceil(BLOCK), 8])?;
    if smem > SMEM_LIMIT {
        let what = format!("{list} keys of dim {d} need {smem} bytes of shared memory, over {SMEM_LIMIT}");
        return Err(Error::Launch { op: OP, what });
    }
    let f = gpu.function(&ATTN.spec(&[]), OP)?;
    let (rows_i, heads_i, d_i, w_i) =
        (int(OP, "rows", rows)?, int(OP, "heads", heads)?, int(OP, "d", d)?, int(OP, "w", w)?);
    let (s_i, latent_i) = (int(OP, "s", s)?, int(OP, "latent rows", latent_rows)?);
    if heads > 65535 {
        return Err(Error::Launch { op: OP, what: format!("{heads} heads exceed the grid's y limit") });
    }
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(q).arg(keys.chunk).arg(keys.ring).arg(keys.latents).arg(window);
    // Without a selection the kernel never reads `sel` (s = 0); any valid pointer stands in.
    launch.arg(sel.unwrap_or(window)).arg(sink).arg(out);
    launch.arg(&rows_i).arg(&heads_i).arg(&d_i).arg(&w_i).arg(&s_i).arg(&latent_i).arg(&scale);
    // SAFETY: arguments match `sparse_attn(const u16* ×4, const int* ×2, const float*, u16*, int ×6, float)`; buffer sizes checked above, and the kernel bounds-checks every key id against the row counts passed.
    unsafe { launch.launch(grid((rows, heads), ATTN_THREADS, smem)) }
        .doing(|| format!("launching {OP} on {rows} rows × {heads} heads × {list} keys"))?;
    Ok(())
}

/// Threads per block of `compress_pool`, one channel each.
const POOL_THREADS: u32 = 128;

/// `attn::pool` for `groups` groups: kv and gate f32 `[groups·ratio, d]` (a group's rows consecutive) to bf16 `[groups, d]`.
pub fn compress_pool(
    gpu: &Gpu,
    kv: &In<'_>,
    gate: &In<'_>,
    out: &mut Out<'_>,
    (groups, ratio, d): (usize, usize, usize),
) -> Result<(), Error> {
    const OP: &str = "compress_pool";
    if ratio == 0 {
        return Err(Error::Launch { op: OP, what: "ratio 0 pools nothing".into() });
    }
    need(OP, "kv", kv.len(), bytes(OP, &[groups, ratio, d, 4])?)?;
    need(OP, "gate", gate.len(), bytes(OP, &[groups, ratio, d, 4])?)?;
    need(OP, "out", out.len(), bytes(OP, &[groups, d, 2])?)?;
    if groups == 0 || d == 0 {
        return Ok(());
    }
    let f = gpu.function(&COMPRESS.spec(&[]), OP)?;
    let (ratio_i, d_i) = (int(OP, "ratio", ratio)?, int(OP, "d", d)?);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(kv).arg(gate).arg(out).arg(&ratio_i).arg(&d_i);
    let cfg = grid((groups, d.div_ceil(POOL_THREADS as usize)), POOL_THREADS, 0);
    // SAFETY: arguments match `compress_pool(const float*, const float*, u16*, int, int)`; sizes checked above.
    unsafe { launch.launch(cfg) }.doing(|| format!("launching {OP} on {groups} groups of {ratio} × {d}"))?;
    Ok(())
}
