//! `sparse_attn` over listed key ids and the compressor's `compress_pool`, in the CPU reference's order of operations.

use super::{In, Out, bytes, grid, int, need};
use crate::cuda::kernels::{ATTN, COMPRESS};
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{DevicePtr, PushKernelArg};
use tf_cuda::error::DriverResultExt;
use tf_cuda::launch::grid3;
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
/// `PV_SCRATCH` in `kernels/attn.cu`: floats of the kernel's static p·v scratch.
const PV_SCRATCH: usize = 2048;
/// Dynamic shared memory a launch may use without opting in: 48 KiB less the static `scratch` and `sum_exp`.
const SMEM_LIMIT: usize = 48 * 1024 - PV_SCRATCH * 4 - 16;

/// One lane's share of `sparse_attn_rows`: its rows' keys and key-id lists, as `sparse_attn` takes them.
pub struct LaneKeys<'a> {
    pub keys: KeyRows<'a>,
    pub window: &'a In<'a>,
    pub sel: Option<&'a In<'a>>,
    pub rows: usize,
}

/// Checks one call's key rows and lists against its shape; returns the latent rows its view holds.
fn check_keys(op: &'static str, k: &LaneKeys<'_>, (d, w, s): (usize, usize, usize)) -> Result<usize, Error> {
    if k.sel.is_none() && s > 0 {
        return Err(Error::Launch { op, what: format!("s = {s} selected keys but no `sel` buffer") });
    }
    need(op, "chunk", k.keys.chunk.len(), bytes(op, &[k.rows, d, 2])?)?;
    need(op, "ring", k.keys.ring.len(), bytes(op, &[w, d, 2])?)?;
    need(op, "window", k.window.len(), bytes(op, &[k.rows, w, 4])?)?;
    if let Some(sel) = k.sel {
        need(op, "sel", sel.len(), bytes(op, &[k.rows, s, 4])?)?;
    }
    // A zero head dim holds no rows (the launch returns before it runs).
    Ok(if d == 0 { 0 } else { k.keys.latents.len() / bytes(op, &[d, 2])? })
}

/// Dynamic shared memory of a (row, head) block over `w + s` keys of dim `d`, or an error past the limit.
fn shared_bytes(op: &'static str, (d, w, s): (usize, usize, usize)) -> Result<usize, Error> {
    let list = w.checked_add(s).ok_or_else(|| Error::Launch { op, what: format!("w + s = {w} + {s}") })?;
    let smem = bytes(op, &[list, 12])? + bytes(op, &[d, 4])? + bytes(op, &[list.div_ceil(BLOCK), 12])?;
    if smem > SMEM_LIMIT {
        let what = format!("{list} keys of dim {d} need {smem} bytes of shared memory, over {SMEM_LIMIT}");
        return Err(Error::Launch { op, what });
    }
    if d > i32::MAX as usize {
        return Err(Error::Launch { op, what: format!("head dim {d}") });
    }
    Ok(smem)
}

/// Checks q, sink and out of a call of `rows` rows; `None` when it has nothing to run, else the launch's shared memory.
fn check_call(
    op: &'static str,
    (q, sink, out): (&In<'_>, &In<'_>, &Out<'_>),
    (rows, heads, d, w, s): (usize, usize, usize, usize, usize),
) -> Result<Option<usize>, Error> {
    need(op, "q", q.len(), bytes(op, &[rows, heads, d, 2])?)?;
    need(op, "sink", sink.len(), bytes(op, &[heads, 4])?)?;
    need(op, "out", out.len(), bytes(op, &[rows, heads, d, 2])?)?;
    if rows == 0 || heads == 0 || d == 0 {
        return Ok(None);
    }
    if heads > 65535 {
        return Err(Error::Launch { op, what: format!("{heads} heads exceed the grid's y limit") });
    }
    shared_bytes(op, (d, w, s)).map(Some)
}

/// Which kernels run a [`sparse_attn`] call; every path gives the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnPath {
    /// Split where it fits and the call has few (row, head) blocks, else whole.
    Auto,
    /// One block per (row, head): `sparse_attn`.
    Whole,
    /// Scores over key tiles, softmax per (row, head), p·v over column tiles: `attn_scores`, `attn_softmax`, `attn_pv` (an error where it does not fit).
    Split,
}

/// (row, head) pairs up to which [`AttnPath::Auto`] splits: past them the whole kernel already fills the GPU.
const SPLIT_MAX_PAIRS: usize = 512;
/// `SCORE_HEADS`, `SCORE_KEYS`, `PV_HEADS` and `PV_COLS` in `kernels/attn.cu`.
const SCORE_HEADS: usize = 4;
const SCORE_KEYS: usize = 32;
/// `SCORE_PAD` in `kernels/attn.cu`: bf16 after each staged key row.
const SCORE_PAD: usize = 8;
const PV_HEADS: usize = 4;
const PV_COLS: usize = 32;
/// `PV_TILE_PAD` in `kernels/attn.cu`: bf16 between two softmax blocks' staged value tiles.
const PV_TILE_PAD: usize = 32;
/// Most dynamic shared memory a split kernel asks for: with `attn_scores`' 256 static bytes, under GB10's 99 KiB a block (H100: 227 KiB).
const SPLIT_SMEM_MAX: usize = 96 * 1024;
/// `SOFTMAX_THREADS` in `kernels/attn.cu`: an `attn_softmax` block, one per (row, head).
const SOFTMAX_THREADS: u32 = 256;

/// Dynamic shared memory of the split path's three kernels (`attn_scores`, `attn_softmax`, `attn_pv`), or why it cannot run this call.
fn split_fit(gpu: &Gpu, keys: &KeyRows<'_>, dims: (usize, usize, usize)) -> Result<[usize; 3], String> {
    let aligned = |v: &In<'_>| super::dense::aligned16(gpu, v);
    if !(aligned(keys.chunk) && aligned(keys.ring) && aligned(keys.latents)) {
        return Err("key rows not 16-byte aligned".into());
    }
    split_smem(dims)
}

/// [`split_fit`]'s shapes: head dims a multiple of `PV_COLS`, a key list, and each kernel's shared memory under [`SPLIT_SMEM_MAX`].
fn split_smem((d, w, s): (usize, usize, usize)) -> Result<[usize; 3], String> {
    let list = w + s;
    if !d.is_multiple_of(PV_COLS) || list == 0 {
        return Err(format!("head dim {d} is not a multiple of {PV_COLS}, or the key list is empty"));
    }
    let nblk = list.div_ceil(BLOCK);
    let scores = SCORE_HEADS * d * 4 + SCORE_KEYS * (d + SCORE_PAD) * 2;
    let softmax = 4 * (list + 3 * nblk);
    let pv = 8 * list + 4 * (PV_HEADS * list + PV_HEADS * (nblk + 1) + nblk * PV_HEADS * PV_COLS);
    let pv = pv.next_multiple_of(16) + nblk * (BLOCK * PV_COLS + PV_TILE_PAD) * 2;
    if scores.max(softmax).max(pv) > SPLIT_SMEM_MAX {
        let what = format!("scores {scores}, softmax {softmax}, p·v {pv}");
        return Err(format!("{list} keys of dim {d} need more than {SPLIT_SMEM_MAX} bytes of shared memory ({what})"));
    }
    Ok([scores, softmax, pv])
}

/// A split kernel allowed [`SPLIT_SMEM_MAX`] bytes of dynamic shared memory (staged tiles pass the default 48 KiB): one value, so concurrent launches never race on it.
fn split_function(gpu: &Gpu, entry: &'static str) -> Result<cudarc::driver::CudaFunction, Error> {
    let f = gpu.function(&ATTN.spec(&[]), entry)?;
    let max_smem = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    f.set_attribute(max_smem, SPLIT_SMEM_MAX as i32)
        .doing(|| format!("allowing {entry} {SPLIT_SMEM_MAX} bytes of shared memory"))?;
    Ok(f)
}

/// `attn::sparse::attend` per (row, head) on `path`: q bf16 `[rows, heads, d]` over key ids i32 `window[rows, w] ++ sel[rows, s]`.
#[allow(clippy::too_many_arguments)]
pub fn sparse_attn(
    path: AttnPath,
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
    let lane =
        LaneKeys { keys: KeyRows { chunk: keys.chunk, ring: keys.ring, latents: keys.latents }, window, sel, rows };
    let latent_rows = check_keys(OP, &lane, (d, w, s))?;
    let Some(smem) = check_call(OP, (q, sink, &*out), (rows, heads, d, w, s))? else { return Ok(()) };
    let (rows_i, heads_i, d_i, w_i) =
        (int(OP, "rows", rows)?, int(OP, "heads", heads)?, int(OP, "d", d)?, int(OP, "w", w)?);
    let (s_i, latent_i) = (int(OP, "s", s)?, int(OP, "latent rows", latent_rows)?);
    // Without a selection the kernel never reads `sel` (s = 0); any valid pointer stands in.
    let sel = sel.unwrap_or(window);
    // The whole kernel's path (the default) asks nothing of the split one.
    let split = match path {
        AttnPath::Whole => None,
        AttnPath::Auto if rows * heads > SPLIT_MAX_PAIRS => None,
        AttnPath::Auto => split_fit(gpu, keys, (d, w, s)).ok(),
        AttnPath::Split => Some(split_fit(gpu, keys, (d, w, s)).map_err(|what| Error::Launch { op: OP, what })?),
    };
    if let Some([smem_scores, smem_softmax, smem_pv]) = split {
        let (list, nblk) = (w + s, (w + s).div_ceil(BLOCK));
        let what = |k: &str| format!("launching {k} on {rows} rows × {heads} heads × {list} keys");
        let mut scores = gpu.pool().take(bytes(OP, &[rows, heads, list, 4])?)?;
        let mut aux = gpu.pool().take(bytes(OP, &[rows, heads, nblk + 1, 4])?)?;
        let f = split_function(gpu, "attn_scores")?;
        let mut launch = gpu.stream().launch_builder(&f);
        let mut sv = scores.view_mut();
        launch.arg(q).arg(keys.chunk).arg(keys.ring).arg(keys.latents).arg(window).arg(sel).arg(&mut sv);
        launch.arg(&rows_i).arg(&heads_i).arg(&d_i).arg(&w_i).arg(&s_i).arg(&latent_i).arg(&scale);
        let g = (list.div_ceil(SCORE_KEYS), heads.div_ceil(SCORE_HEADS), rows);
        // SAFETY: arguments match `attn_scores(const u16* ×4, const int* ×2, float*, int ×6, float)`; sizes checked above, rows 16-byte aligned and d % 32 == 0 (split_fit), scores hold [rows, heads, w + s].
        unsafe { launch.launch(grid3(g, SCORE_KEYS as u32, smem_scores)) }.doing(|| what("attn_scores"))?;
        let f = gpu.function(&ATTN.spec(&[]), "attn_softmax")?;
        let mut launch = gpu.stream().launch_builder(&f);
        let (mut sv, mut av, list_i) = (scores.view_mut(), aux.view_mut(), int(OP, "w + s", list)?);
        launch.arg(&mut sv).arg(sink).arg(&mut av).arg(&heads_i).arg(&list_i);
        // SAFETY: arguments match `attn_softmax(float*, const float*, float*, int, int)`; scores hold [rows, heads, w + s], aux [rows, heads, nblk + 1], sink [heads].
        unsafe { launch.launch(grid((heads, rows), SOFTMAX_THREADS, smem_softmax)) }.doing(|| what("attn_softmax"))?;
        let f = split_function(gpu, "attn_pv")?;
        let mut launch = gpu.stream().launch_builder(&f);
        let (sv, av) = (scores.view(), aux.view());
        launch.arg(&sv).arg(&av).arg(keys.chunk).arg(keys.ring).arg(keys.latents).arg(window).arg(sel).arg(out);
        launch.arg(&rows_i).arg(&heads_i).arg(&d_i).arg(&w_i).arg(&s_i).arg(&latent_i);
        let g = (d / PV_COLS, heads.div_ceil(PV_HEADS), rows);
        let threads = (PV_COLS / 8 * nblk) as u32;
        // SAFETY: arguments match `attn_pv(const float* ×2, const u16* ×3, const int* ×2, u16*, int ×6)`; as above, and the block has a thread group per softmax block.
        unsafe { launch.launch(grid3(g, threads, smem_pv)) }.doing(|| what("attn_pv"))?;
        return Ok(());
    }
    let f = gpu.function(&ATTN.spec(&[]), OP)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(q).arg(keys.chunk).arg(keys.ring).arg(keys.latents).arg(window);
    launch.arg(sel).arg(sink).arg(out);
    launch.arg(&rows_i).arg(&heads_i).arg(&d_i).arg(&w_i).arg(&s_i).arg(&latent_i).arg(&scale);
    // SAFETY: arguments match `sparse_attn(const u16* ×4, const int* ×2, const float*, u16*, int ×6, float)`; buffer sizes checked above, and the kernel bounds-checks every key id against the row counts passed.
    unsafe { launch.launch(grid((rows, heads), ATTN_THREADS, smem)) }
        .doing(|| format!("launching {OP} on {rows} rows × {heads} heads × {} keys", w + s))?;
    Ok(())
}

/// `sparse_attn` of several lanes' rows (in order in `q` and `out`) in one launch: each row reads its own lane's keys.
pub fn sparse_attn_rows(
    gpu: &Gpu,
    q: &In<'_>,
    lanes: &[LaneKeys<'_>],
    sink: &In<'_>,
    out: &mut Out<'_>,
    (heads, d, w, s): (usize, usize, usize, usize),
    scale: f32,
) -> Result<(), Error> {
    const OP: &str = "sparse_attn_rows";
    let rows: usize = lanes.iter().map(|l| l.rows).sum();
    let Some(smem) = check_call(OP, (q, sink, &*out), (rows, heads, d, w, s))? else { return Ok(()) };
    let ptr = |v: &In<'_>| v.device_ptr(gpu.stream()).0;
    let mut table: Vec<u64> = Vec::with_capacity(rows * 6);
    for l in lanes {
        let latent_rows = check_keys(OP, l, (d, w, s))?;
        let counts = int(OP, "chunk rows", l.rows)? as u64 | (int(OP, "latent rows", latent_rows)? as u64) << 32;
        let (chunk, ring, latents, window) = (ptr(l.keys.chunk), ptr(l.keys.ring), ptr(l.keys.latents), ptr(l.window));
        let sel = l.sel.map_or(0, ptr);
        // Each row's word for its lists points at its own row of them.
        for r in 0..l.rows as u64 {
            table.extend([chunk, ring, latents, window + r * (w as u64) * 4, sel + r * (s as u64) * 4, counts]);
        }
    }
    let table = gpu.upload(&table)?;
    let table = table.view();
    let f = gpu.function(&ATTN.spec(&[]), OP)?;
    let (heads_i, d_i, w_i, s_i) = (int(OP, "heads", heads)?, int(OP, "d", d)?, int(OP, "w", w)?, int(OP, "s", s)?);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(q).arg(&table).arg(sink).arg(out);
    launch.arg(&heads_i).arg(&d_i).arg(&w_i).arg(&s_i).arg(&scale);
    // SAFETY: arguments match `sparse_attn_rows(const u16*, const u64*, const float*, u16*, int ×4, float)`; every lane's buffers were checked above, the table holds a row per row, and the kernel bounds-checks key ids against each row's counts.
    unsafe { launch.launch(grid((rows, heads), ATTN_THREADS, smem)) }
        .doing(|| format!("launching {OP} on {} lanes, {rows} rows × {heads} heads × {} keys", lanes.len(), w + s))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_path_takes_dsv41_decode_and_refuses_what_its_kernels_cannot_hold() {
        // V4.1's decode list: 128 window + 512 selected keys of dim 512, ten softmax blocks.
        let [scores, softmax, pv] = split_smem((512, 128, 512)).unwrap();
        assert_eq!(scores, 4 * 512 * 4 + 32 * (512 + 8) * 2, "four heads' f32 queries and 32 padded key rows");
        assert_eq!(softmax, 4 * (640 + 30));
        let staged = 10 * (64 * 32 + 32) * 2;
        assert_eq!(
            pv,
            8 * 640 + 4 * (4 * 640 + 4 * 11 + 10 * 4 * 32) + staged,
            "pointers, probabilities, partials, value tiles"
        );
        assert!(split_smem((80, 70, 30)).is_err(), "80 is no multiple of the 32-column tile");
        assert!(split_smem((128, 0, 0)).is_err(), "an empty list has no softmax block");
        // 1,152 keys: 18 staged value tiles (75 KiB) plus partials, probabilities and pointers pass 96 KiB.
        assert!(split_smem((512, 128, 1024)).is_err());
        assert!(split_smem((512, 128, 768)).is_ok());
        // An odd list puts the tiles at the next 16-byte boundary.
        let [_, _, odd] = split_smem((512, 1, 0)).unwrap();
        assert_eq!(odd, (8 + 4 * (4 + 4 * 2 + 4 * 32usize)).next_multiple_of(16) + (64 * 32 + 32) * 2);
    }
}
