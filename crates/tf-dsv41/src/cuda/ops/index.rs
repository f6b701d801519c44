//! The lightning indexer on the GPU: `index_scores` and `index_select`, bit-exact to `attn::index` given equal inputs.

use super::{In, Out, bytes, grid, int, need};
use crate::cuda::kernels::INDEX;
use cudarc::driver::{DevicePtr, DevicePtrMut, PushKernelArg};
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// Groups per block of `index_scores` (a warp each) and heads per lane (kernels/index.cu SCORE_*).
const SCORE_WARPS: usize = 4;
const SCORE_MAX_HPL: usize = 4;
/// Threads per row of `index_select` (a multiple of 32 for its block scan).
const SELECT_THREADS: u32 = 512;
/// Dynamic shared memory a launch may use, leaving room for the kernel's static arrays under 48 KiB.
const SMEM_LIMIT: usize = 44 * 1024;

/// Groups the last row sees, which is the width every score and mask row has: `(pos0 + rows) / ratio`.
fn expect_cap(op: &'static str, cap: usize, (pos0, rows, ratio): (usize, usize, usize)) -> Result<(), Error> {
    if ratio == 0 {
        return Err(Error::Launch { op, what: "ratio 0".into() });
    }
    let want = (pos0 + rows) / ratio;
    if cap != want {
        return Err(Error::Launch { op, what: format!("cap {cap} is not (pos0 + rows) / ratio = {want}") });
    }
    int(op, "pos0 + rows", pos0 + rows).map(|_| ())
}

/// The score width of a lane's rows, `(pos0 + rows) / ratio`, with `expect_cap`'s checks.
fn cap_of(op: &'static str, (pos0, rows, ratio): (usize, usize, usize)) -> Result<usize, Error> {
    let cap = (pos0 + rows) / ratio.max(1);
    expect_cap(op, cap, (pos0, rows, ratio)).map(|_| cap)
}

/// `attn::index_score` of q bf16 `[rows, heads, hd]`, w `[rows, heads]`, keys `[groups, hd]`: f32 `[rows, cap]`.
#[allow(clippy::too_many_arguments)]
pub fn index_scores(
    gpu: &Gpu,
    q: &In<'_>,
    w: &In<'_>,
    keys: &In<'_>,
    scores: &mut Out<'_>,
    (rows, heads, hd, groups, cap): (usize, usize, usize, usize, usize),
    (pos0, ratio): (usize, usize),
    c: f32,
) -> Result<(), Error> {
    const OP: &str = "index_scores";
    // `c = hd^-0.5 · heads^-0.5` as the CPU's `select`; a visible group at or past `groups` scores the CPU's zero key.
    expect_cap(OP, cap, (pos0, rows, ratio))?;
    need(OP, "q", q.len(), bytes(OP, &[rows, heads, hd, 2])?)?;
    need(OP, "w", w.len(), bytes(OP, &[rows, heads, 2])?)?;
    need(OP, "keys", keys.len(), bytes(OP, &[groups, hd, 2])?)?;
    need(OP, "scores", scores.len(), bytes(OP, &[rows, cap, 4])?)?;
    if rows == 0 || cap == 0 {
        return Ok(());
    }
    if heads > 32 * SCORE_MAX_HPL {
        return Err(Error::Launch { op: OP, what: format!("{heads} heads exceed {}", 32 * SCORE_MAX_HPL) });
    }
    let smem = bytes(OP, &[heads * (hd + 1) + heads + SCORE_WARPS * hd, 4])?;
    if smem > SMEM_LIMIT {
        let what = format!("{heads} heads × {hd} need {smem} bytes of shared memory, over {SMEM_LIMIT}");
        return Err(Error::Launch { op: OP, what });
    }
    let f = gpu.function(&INDEX.spec(&[]), OP)?;
    let (heads_i, hd_i, groups_i, cap_i) =
        (int(OP, "heads", heads)?, int(OP, "hd", hd)?, int(OP, "groups", groups)?, int(OP, "cap", cap)?);
    let (pos0_i, ratio_i) = (int(OP, "pos0", pos0)?, int(OP, "ratio", ratio)?);
    // The grid's y dimension holds 65,535 blocks, so a context past 262,140 groups takes several launches.
    for group0 in (0..cap).step_by(65535 * SCORE_WARPS) {
        let group0_i = int(OP, "group0", group0)?;
        let blocks = (cap - group0).div_ceil(SCORE_WARPS).min(65535);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(q).arg(w).arg(keys).arg(&mut *scores);
        launch.arg(&heads_i).arg(&hd_i).arg(&groups_i).arg(&cap_i).arg(&pos0_i).arg(&ratio_i).arg(&c).arg(&group0_i);
        let cfg = grid((rows, blocks), (32 * SCORE_WARPS) as u32, smem);
        // SAFETY: arguments match `index_scores(const u16* ×3, float*, int ×6, float, int)`; sizes checked above.
        unsafe { launch.launch(cfg) }
            .doing(|| format!("launching {OP} on {rows} rows × {cap} groups from {group0}"))?;
    }
    Ok(())
}

/// How a layer's selection relates to the candidate pre-filter (`AttnWeights::is_candidate_source` / `uses_candidates`).
pub enum Candidates<'a, 'b> {
    /// Neither: plain top-k.
    None,
    /// The candidate source: also writes its mask u8 `[rows, cap]` (1 = candidate) from `blocks` blocks of `block` groups.
    Make { mask: &'a mut Out<'b>, blocks: usize, block: usize },
    /// A later layer: groups below the source's visible count whose mask entry is 0 score -inf before the top-k; `mask` is the source's u8 `[rows, (pos0 + rows) / ratio]`, indexed by group number as the CPU's zip does.
    Use { mask: &'a In<'b>, ratio: usize },
}

/// Each row's `attn::top_k` of its visible scores into i32 `[rows, topk]`: `key_id(Latent, g)` ascending, then `KEY_NONE`.
pub fn index_select(
    gpu: &Gpu,
    scores: &In<'_>,
    cands: Candidates<'_, '_>,
    sel: &mut Out<'_>,
    (rows, cap, topk): (usize, usize, usize),
    (pos0, ratio): (usize, usize),
) -> Result<(), Error> {
    const OP: &str = "index_select";
    // Scores past a row's visible count are never read; ties go to the lower group, as the CPU's sort.
    expect_cap(OP, cap, (pos0, rows, ratio))?;
    need(OP, "scores", scores.len(), bytes(OP, &[rows, cap, 4])?)?;
    need(OP, "sel", sel.len(), bytes(OP, &[rows, topk, 4])?)?;
    let (mut mode, mut blocks, mut block, mut src_ratio, mut src_cap, mut smem) = (0, 0, 1, 1, 0, 0);
    match &cands {
        Candidates::None => {}
        Candidates::Make { mask, blocks: b, block: size } => {
            if *size == 0 {
                return Err(Error::Launch { op: OP, what: "candidate blocks of 0 groups".into() });
            }
            need(OP, "mask", mask.len(), bytes(OP, &[rows, cap])?)?;
            (mode, blocks, block, smem) = (1, *b, *size, bytes(OP, &[cap.div_ceil(*size), 5])?);
            if smem > SMEM_LIMIT {
                let what = format!("{cap} groups in blocks of {size} need {smem} bytes of shared memory");
                return Err(Error::Launch { op: OP, what });
            }
        }
        Candidates::Use { mask, ratio: r } => {
            if *r == 0 {
                return Err(Error::Launch { op: OP, what: "candidate source ratio 0".into() });
            }
            (mode, src_ratio, src_cap) = (2, *r, (pos0 + rows) / r);
            need(OP, "mask", mask.len(), bytes(OP, &[rows, src_cap])?)?;
        }
    }
    if rows == 0 {
        return Ok(());
    }
    let f = gpu.function(&INDEX.spec(&[]), OP)?;
    let (cap_i, topk_i, pos0_i, ratio_i) =
        (int(OP, "cap", cap)?, int(OP, "topk", topk)?, int(OP, "pos0", pos0)?, int(OP, "ratio", ratio)?);
    let (mode_i, blocks_i, block_i) = (int(OP, "mode", mode)?, int(OP, "blocks", blocks)?, int(OP, "block", block)?);
    let (src_ratio_i, src_cap_i) = (int(OP, "source ratio", src_ratio)?, int(OP, "source cap", src_cap)?);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(scores);
    match cands {
        Candidates::None => launch.arg(scores),
        Candidates::Make { mask, .. } => launch.arg(mask),
        Candidates::Use { mask, .. } => launch.arg(mask),
    };
    launch.arg(sel).arg(&cap_i).arg(&topk_i).arg(&pos0_i).arg(&ratio_i).arg(&mode_i);
    launch.arg(&blocks_i).arg(&block_i).arg(&src_ratio_i).arg(&src_cap_i);
    // SAFETY: arguments match `index_select(const float*, u8*, int*, int ×9)`; sizes checked above. The kernel writes the mask only in mode 1, where it is the caller's mutable view; modes 0 and 2 only read it (mode 0 never).
    unsafe { launch.launch(grid((rows, 1), SELECT_THREADS, smem)) }
        .doing(|| format!("launching {OP} on {rows} rows × {cap} groups, top {topk}"))?;
    Ok(())
}

/// One lane's rows of `index_scores_rows`: its index keys, its scores `[rows, (pos0 + rows) / ratio]`, and where its rows start in q and w.
pub struct ScoreLane<'a> {
    pub keys: In<'a>,
    pub groups: usize,
    pub scores: Out<'a>,
    pub pos0: usize,
    pub rows: usize,
    pub at: usize,
}

/// `index_scores` of several lanes' rows of q bf16 `[rows, heads, hd]` and w `[rows, heads]` in one launch per 65,535·4 groups.
pub fn index_scores_rows(
    gpu: &Gpu,
    (q, w): (&In<'_>, &In<'_>),
    lanes: &mut [ScoreLane<'_>],
    (heads, hd, ratio): (usize, usize, usize),
    c: f32,
) -> Result<(), Error> {
    const OP: &str = "index_scores_rows";
    let total = lanes.iter().map(|l| l.at + l.rows).max().unwrap_or(0);
    need(OP, "q", q.len(), bytes(OP, &[total, heads, hd, 2])?)?;
    need(OP, "w", w.len(), bytes(OP, &[total, heads, 2])?)?;
    if heads > 32 * SCORE_MAX_HPL {
        return Err(Error::Launch { op: OP, what: format!("{heads} heads exceed {}", 32 * SCORE_MAX_HPL) });
    }
    let (mut table, mut max_cap) = (Vec::<u64>::new(), 0);
    for l in lanes.iter_mut() {
        let cap = cap_of(OP, (l.pos0, l.rows, ratio))?;
        need(OP, "keys", l.keys.len(), bytes(OP, &[l.groups, hd, 2])?)?;
        need(OP, "scores", l.scores.len(), bytes(OP, &[l.rows, cap, 4])?)?;
        let (keys, scores) = (l.keys.device_ptr(gpu.stream()).0, l.scores.device_ptr_mut(gpu.stream()).0);
        let counts = int(OP, "groups", l.groups)? as u64 | (int(OP, "cap", cap)? as u64) << 32;
        for r in 0..l.rows {
            let pos = int(OP, "position", l.pos0 + r)? as u64 | (int(OP, "row", l.at + r)? as u64) << 32;
            table.extend([keys, scores + (r * cap * 4) as u64, counts, pos]);
        }
        max_cap = max_cap.max(cap);
    }
    let rows = table.len() / 4;
    if rows == 0 || max_cap == 0 {
        return Ok(());
    }
    let smem = bytes(OP, &[heads * (hd + 1) + heads + SCORE_WARPS * hd, 4])?;
    if smem > SMEM_LIMIT {
        let what = format!("{heads} heads × {hd} need {smem} bytes of shared memory, over {SMEM_LIMIT}");
        return Err(Error::Launch { op: OP, what });
    }
    let table = gpu.upload(&table)?;
    let table = table.view();
    let f = gpu.function(&INDEX.spec(&[]), OP)?;
    let (heads_i, hd_i, ratio_i) = (int(OP, "heads", heads)?, int(OP, "hd", hd)?, int(OP, "ratio", ratio)?);
    for group0 in (0..max_cap).step_by(65535 * SCORE_WARPS) {
        let group0_i = int(OP, "group0", group0)?;
        let blocks = (max_cap - group0).div_ceil(SCORE_WARPS).min(65535);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(q).arg(w).arg(&table).arg(&heads_i).arg(&hd_i).arg(&ratio_i).arg(&c).arg(&group0_i);
        let cfg = grid((rows, blocks), (32 * SCORE_WARPS) as u32, smem);
        // SAFETY: arguments match `index_scores_rows(const u16* ×2, const u64*, int ×3, float, int)`; every lane's buffers were checked above and each table row names a row of q and w below `total`.
        unsafe { launch.launch(cfg) }.doing(|| format!("launching {OP} on {rows} rows × {max_cap} groups"))?;
    }
    Ok(())
}

/// One lane's candidate mask in `index_select_rows`: none, its own to write `[rows, cap]`, or its source's to read.
pub enum LaneMask<'a> {
    None,
    Make(Out<'a>),
    Use(In<'a>),
}

/// One lane's rows of `index_select_rows`: its scores and selection `[rows, topk]`, and its mask as the launch's mode asks.
pub struct SelectLane<'a> {
    pub scores: In<'a>,
    pub mask: LaneMask<'a>,
    pub sel: Out<'a>,
    pub pos0: usize,
    pub rows: usize,
}

/// The candidate rule of an `index_select_rows` launch, as `Candidates` without the masks (each lane has its own).
#[derive(Clone, Copy, Debug)]
pub enum RowCandidates {
    None,
    Make { blocks: usize, block: usize },
    Use { ratio: usize },
}

/// `index_select` of several lanes' rows in one launch; `cands` as in `index_select`, its masks per lane.
pub fn index_select_rows(
    gpu: &Gpu,
    lanes: &mut [SelectLane<'_>],
    cands: RowCandidates,
    (topk, ratio): (usize, usize),
) -> Result<(), Error> {
    const OP: &str = "index_select_rows";
    let (mode, blocks, block, src_ratio) = match cands {
        RowCandidates::None => (0, 0, 1, 1),
        RowCandidates::Make { blocks, block } if block > 0 => (1, blocks, block, 1),
        RowCandidates::Use { ratio: r } if r > 0 => (2, 0, 1, r),
        _ => return Err(Error::Launch { op: OP, what: "candidate blocks of 0 groups, or source ratio 0".into() }),
    };
    let (mut table, mut smem) = (Vec::<u64>::new(), 0);
    for l in lanes.iter_mut() {
        let cap = cap_of(OP, (l.pos0, l.rows, ratio))?;
        need(OP, "scores", l.scores.len(), bytes(OP, &[l.rows, cap, 4])?)?;
        need(OP, "sel", l.sel.len(), bytes(OP, &[l.rows, topk, 4])?)?;
        let src_cap = (l.pos0 + l.rows) / src_ratio;
        let (mask, width) = match (&mut l.mask, mode) {
            (LaneMask::None, 0) => (0, 0),
            (LaneMask::Make(m), 1) => {
                need(OP, "mask", m.len(), bytes(OP, &[l.rows, cap])?)?;
                smem = smem.max(bytes(OP, &[cap.div_ceil(block), 5])?);
                (m.device_ptr_mut(gpu.stream()).0, cap)
            }
            (LaneMask::Use(m), 2) => {
                need(OP, "mask", m.len(), bytes(OP, &[l.rows, src_cap])?)?;
                (m.device_ptr(gpu.stream()).0, src_cap)
            }
            _ => return Err(Error::Launch { op: OP, what: format!("a lane's mask does not fit mode {mode}") }),
        };
        let (scores, sel) = (l.scores.device_ptr(gpu.stream()).0, l.sel.device_ptr_mut(gpu.stream()).0);
        let caps = int(OP, "cap", cap)? as u64 | (int(OP, "source cap", src_cap)? as u64) << 32;
        for r in 0..l.rows {
            let m = if mask == 0 { 0 } else { mask + (r * width) as u64 };
            let pos = int(OP, "position", l.pos0 + r)? as u64;
            table.extend([scores + (r * cap * 4) as u64, m, sel + (r * topk * 4) as u64, caps, pos]);
        }
    }
    if smem > SMEM_LIMIT {
        return Err(Error::Launch { op: OP, what: format!("candidate blocks need {smem} bytes of shared memory") });
    }
    let rows = table.len() / 5;
    if rows == 0 {
        return Ok(());
    }
    let table = gpu.upload(&table)?;
    let table = table.view();
    let f = gpu.function(&INDEX.spec(&[]), OP)?;
    let (topk_i, ratio_i, mode_i) = (int(OP, "topk", topk)?, int(OP, "ratio", ratio)?, int(OP, "mode", mode)?);
    let (blocks_i, block_i, src_i) =
        (int(OP, "blocks", blocks)?, int(OP, "block", block)?, int(OP, "ratio", src_ratio)?);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(&table).arg(&topk_i).arg(&ratio_i).arg(&mode_i).arg(&blocks_i).arg(&block_i).arg(&src_i);
    // SAFETY: arguments match `index_select_rows(const u64*, int ×6)`; every row's scores, mask and sel were checked above, and only mode 1 writes masks, each a lane's mutable view.
    unsafe { launch.launch(grid((rows, 1), SELECT_THREADS, smem)) }
        .doing(|| format!("launching {OP} on {rows} rows, top {topk}"))?;
    Ok(())
}
