//! Routed FP4 experts grouped by expert: a prompt reads and decodes an expert once per tile of its pairs, each pair's bits unchanged.

use crate::cuda::{FP4_MAX_ROWS, Fp4Experts, Fp4Plan, RoutedActs, as_i32, bytes, check_len, routed_extents};
use cudarc::driver::PushKernelArg;
use tf_cuda::error::DriverResultExt;
use tf_cuda::launch::grid;
use tf_cuda::{Error, Gpu, PoolBuf};

/// Most rows a tile of [`fp4_group`] may hold: the tiled kernel's block rows (tiles past `FP4_MAX_ROWS` take it in [`fp4_gemv_grouped`]).
pub const TILE_ROWS: usize = 64;

/// Outputs a block of the tiled kernel (`fp4_gemm_grouped`) computes for its tile's rows.
const TILE_OUTS: usize = 64;

/// Shared memory `fp4_group` may use without opting in: three ints per bucket.
const GROUP_SMEM: usize = 48 << 10;

/// Pairs grouped on the device by [`fp4_group`]: `order` holds pair indices by bucket, `tiles` `[cap][3]` (bucket, start, rows).
#[derive(Debug)]
pub struct Fp4Groups<'g> {
    order: PoolBuf<'g>,
    tiles: PoolBuf<'g>,
    cap: usize,
    pairs: usize,
    experts: usize,
    rows: usize,
}

impl Fp4Groups<'_> {
    /// Tiles the launch grid spans (the groups' own come first, the rest are empty).
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Rows per tile.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The grouping as the device wrote it: (order, tiles), for checks.
    pub fn download(&self, gpu: &Gpu) -> Result<(Vec<i32>, Vec<[i32; 3]>), Error> {
        let tiles: Vec<i32> = gpu.download(&self.tiles)?;
        let order: Vec<i32> = gpu.download(&self.order)?;
        Ok((order[..self.pairs].to_vec(), tiles[..self.cap * 3].chunks_exact(3).map(|t| [t[0], t[1], t[2]]).collect()))
    }
}

/// At most this many tiles: each non-empty bucket (the experts and one for bad ids) wastes less than one tile.
pub fn group_cap(pairs: usize, experts: usize, rows: usize) -> usize {
    pairs.div_ceil(rows.max(1)) + pairs.min(experts + 1)
}

/// What `fp4_group` writes, on the CPU: each bucket's pairs in pair order (bad ids in bucket `experts`), tiles padded to the cap.
pub fn group_pairs(ids: &[i32], experts: usize, rows: usize) -> (Vec<i32>, Vec<[i32; 3]>) {
    let bucket = |e: i32| usize::try_from(e).ok().filter(|&e| e < experts).unwrap_or(experts);
    let mut by: Vec<Vec<i32>> = vec![Vec::new(); experts + 1];
    for (p, &e) in ids.iter().enumerate() {
        by[bucket(e)].push(p as i32);
    }
    let (mut order, mut tiles) = (Vec::with_capacity(ids.len()), Vec::new());
    for (b, pairs) in by.iter().enumerate() {
        for (i, chunk) in pairs.chunks(rows).enumerate() {
            tiles.push([b as i32, (order.len() + i * rows) as i32, chunk.len() as i32]);
        }
        order.extend(pairs);
    }
    let cap = group_cap(ids.len(), experts, rows);
    assert!(tiles.len() <= cap, "{} tiles past the cap {cap}", tiles.len());
    tiles.resize(cap, [0; 3]);
    (order, tiles)
}

/// Groups `pairs` routed ids (i32, bad ones allowed) over `experts` into tiles of at most `rows` (1..=64) pairs, on the device.
pub fn fp4_group<'g>(
    gpu: &'g Gpu,
    ids: &PoolBuf<'_>,
    pairs: usize,
    experts: usize,
    rows: usize,
) -> Result<Fp4Groups<'g>, Error> {
    const OP: &str = "fp4_group";
    if !(1..=TILE_ROWS).contains(&rows) {
        return Err(Error::Launch { op: OP, what: format!("{rows} rows per tile (1..={TILE_ROWS})") });
    }
    let smem = bytes(OP, experts + 1, 12)?;
    if smem > GROUP_SMEM {
        return Err(Error::Launch { op: OP, what: format!("{experts} experts need {smem} bytes of shared memory") });
    }
    check_len(OP, "ids", ids, bytes(OP, pairs, 4)?)?;
    let cap = group_cap(pairs, experts, rows);
    let (pairs_i, experts_i, rows_i, cap_i) = (
        as_i32(OP, "pairs", pairs)?,
        as_i32(OP, "experts", experts)?,
        as_i32(OP, "rows", rows)?,
        as_i32(OP, "cap", cap)?,
    );
    as_i32(OP, "cap × 3", cap * 3)?;
    let mut order = gpu.pool().take(bytes(OP, pairs.max(1), 4)?)?;
    let mut tiles = gpu.pool().take(bytes(OP, cap.max(1), 12)?)?;
    if pairs > 0 {
        let f = Fp4Plan::new(1, 32).function(gpu, OP)?;
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(ids.dev()).arg(&pairs_i).arg(&experts_i).arg(&rows_i);
        launch.arg(order.dev_mut()).arg(tiles.dev_mut()).arg(&cap_i);
        // SAFETY: arguments match fp4_group's (int*, int, int, int, int*, int*, int); order holds pairs, tiles cap × 3 ints.
        unsafe { launch.launch(grid((1, 1), 32, smem)) }.doing(|| format!("launching {OP} on {pairs} pairs"))?;
    }
    Ok(Fp4Groups { order, tiles, cap, pairs, experts, rows })
}

/// [`crate::cuda::fp4_gemv_routed`]'s bits through `groups` (same ids): tiles of up to 8 pairs by the multi-row GEMV, larger ones by the tiled kernel `fp4_gemm_grouped`.
pub fn fp4_gemv_grouped(
    gpu: &Gpu,
    experts: &Fp4Experts<'_, '_>,
    groups: &Fp4Groups<'_>,
    (codes, scales): (&PoolBuf<'_>, &PoolBuf<'_>),
    acts: RoutedActs,
    y: &mut PoolBuf<'_>,
    pairs: usize,
) -> Result<(), Error> {
    let tiled = groups.rows > FP4_MAX_ROWS;
    let op = if tiled { "fp4_gemm_grouped" } else { "fp4_gemv_grouped" };
    let (n, k) = (experts.n, experts.k);
    if (groups.pairs, groups.experts) != (pairs, experts.count) {
        let what = format!(
            "groups of {} pairs over {} experts, launch of {pairs} over {}",
            groups.pairs, groups.experts, experts.count
        );
        return Err(Error::Launch { op, what });
    }
    let (_, [n_i, k_i, e_i, div_i]) = routed_extents(op, experts, (codes, scales), acts, y, pairs)?;
    if n == 0 || pairs == 0 {
        return Ok(());
    }
    // The tiled kernel lives in the one-row build of fp4_gemv.cu; its static shared memory is 19 KB, under the 48 KB default.
    let plan = Fp4Plan::new(if tiled { 1 } else { groups.rows }, k);
    let f = plan.function(gpu, op)?;
    let seg = as_i32(op, "seg", plan.seg)?;
    // The grid's y extent is at most 65535 tiles a launch.
    for t0 in (0..groups.cap).step_by(65535) {
        let count = 65535.min(groups.cap - t0);
        let tiles = groups.tiles.dev().slice(t0 * 12..);
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(experts.wptr.dev()).arg(experts.sptr.dev()).arg(&e_i).arg(&tiles).arg(groups.order.dev());
        launch.arg(codes.dev()).arg(scales.dev()).arg(&div_i).arg(y.dev_mut()).arg(&n_i).arg(&k_i);
        let cfg = if tiled { grid((n.div_ceil(TILE_OUTS), count), 256, 0) } else { plan.config(n, count) };
        if !tiled {
            launch.arg(&seg);
        }
        // SAFETY: arguments match the kernel's (seg last for the GEMV only); extents checked above; tiles name pairs < `pairs` (fp4_group wrote them).
        unsafe { launch.launch(cfg) }
            .doing(|| format!("launching {op} on {count} tiles of {} ×{n}×{k}", groups.rows))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_pair_order_within_an_expert_and_fit_the_cap() {
        let ids = [3, 1, 3, 3, -1, 1, 9, 3, 3, 3, 3, 3, 3, 0];
        let (order, tiles) = group_pairs(&ids, 4, 4);
        assert_eq!(order, [13, 1, 5, 0, 2, 3, 7, 8, 9, 10, 11, 12, 4, 6]);
        let want = [[0, 0, 1], [1, 1, 2], [3, 3, 4], [3, 7, 4], [3, 11, 1], [4, 12, 2]];
        assert_eq!(&tiles[..want.len()], want);
        assert_eq!(tiles.len(), group_cap(ids.len(), 4, 4));
        assert!(tiles[want.len()..].iter().all(|t| t[2] == 0), "tiles past the groups are empty");
    }

    #[test]
    fn the_cap_bounds_every_grouping() {
        let mut rng = tf_core::rng::SplitMix64::new(5);
        for case in 0..400 {
            let (pairs, experts, rows) = (case % 197, 1 + case % 13, 1 + case % TILE_ROWS);
            let ids: Vec<i32> = (0..pairs).map(|_| (rng.next_u64() % (experts as u64 + 2)) as i32 - 1).collect();
            let (order, tiles) = group_pairs(&ids, experts, rows);
            let mut seen: Vec<i32> = order.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..pairs as i32).collect::<Vec<_>>(), "case {case}: every pair once");
            let live: usize = tiles.iter().map(|t| t[2] as usize).sum();
            assert_eq!(live, pairs, "case {case}: tiles cover the pairs");
            assert!(tiles.iter().all(|t| (0..=rows as i32).contains(&t[2])), "case {case}: tile sizes");
        }
    }
}
