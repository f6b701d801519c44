//! MUL1's integer core, `y_c = Σ_i a_i·bytesum(state_ic·M)` exact in i32 (quant.md §1.6's int8 trick): the least any MUL1 GEMV issues, so its speed bounds theirs.

use crate::Exl3Weight;
use crate::cuda::{as_i32, bytes, check_len};
use crate::exl3::Codebook;
use crate::exl3::codebook::mul1_bytesum;
use crate::exl3_mma::{Exl3Experts, fast_fn, x_rows};
use cudarc::driver::{DevicePtr, PushKernelArg};
use tf_cuda::error::DriverResultExt;
use tf_cuda::launch::grid3;
use tf_cuda::{Error, Gpu, PoolBuf};

/// Warps a block holds, and tile columns a warp sums (the kernel's 4 and `BYTEDOT_TC`).
const WARPS: usize = 4;
const WARP_COLS: usize = 4;
/// Warps a launch aims for (about 128 per SM of an H100/H200, two waves at full occupancy).
const TARGET_WARPS: usize = 16_896;

/// `Σ_i a_i · bytesum(state_ic)` per column for one row of int8 activations, from the tile states (the CPU reference).
pub fn bytedot_cpu(w: &Exl3Weight, a: &[i8]) -> Vec<i32> {
    assert_eq!(a.len(), w.in_p, "one row of in_p activations");
    let mut y = vec![0i32; w.out_p];
    w.for_each_state(|r, c, st| y[c] += i32::from(a[r]) * mul1_bytesum(st) as i32);
    y
}

/// Rows of int8 activations as the kernel reads them: per 16 inputs, four lanes' splats of rows (2m, 2m+1, 2m+8, 2m+9).
pub fn pack_acts(a: &[i8], in_p: usize) -> Vec<u32> {
    assert!(in_p.is_multiple_of(16) && a.len().is_multiple_of(in_p), "rows of in_p (a multiple of 16) activations");
    let splat = |v: i8| u32::from(v as u8) * 0x0101_0101;
    a.chunks_exact(16)
        .flat_map(|t| (0..4).flat_map(move |m| [2 * m, 2 * m + 1, 2 * m + 8, 2 * m + 9].map(|r| splat(t[r]))))
        .collect()
}

/// Tile rows per split: a function of the shape and job count only (the sums are exact in any order anyway).
pub fn split_tiles(in_p: usize, out_p: usize, jobs: usize) -> usize {
    let per = (in_p / 16) * (out_p / 16 / WARP_COLS).max(1) * jobs.max(1) / TARGET_WARPS;
    per.clamp(4, 64).min(in_p / 16).max(1)
}

impl Exl3Experts<'_, '_> {
    /// `y[p] = bytedot(W[ids[p]], a[topk > 0 ? p / topk : p])`, i32 `[pairs, out_p]`, `xs` from [`pack_acts`], MUL1 only; a bad id gives `i32::MIN`s.
    pub fn mul1_bytedot(
        &self,
        gpu: &Gpu,
        ids: &PoolBuf<'_>,
        xs: &PoolBuf<'_>,
        topk: usize,
        y: &mut PoolBuf<'_>,
        pairs: usize,
    ) -> Result<(), Error> {
        const OP: &str = "exl3_mul1_bytedot";
        if self.codebook != Codebook::Mul1.index() as i32 {
            return Err(Error::Launch { op: OP, what: format!("codebook {} is not MUL1 (2)", self.codebook) });
        }
        if pairs > 65_535 {
            return Err(Error::Launch { op: OP, what: format!("{pairs} jobs exceed one launch's grid") });
        }
        if !self.out_p.is_multiple_of(16 * WARP_COLS) {
            return Err(Error::Launch {
                op: OP,
                what: format!("{} outputs: a warp sums 64, so out_p must be a multiple", self.out_p),
            });
        }
        check_len(OP, "ids", ids, bytes(OP, pairs, 4)?)?;
        check_len(OP, "xs", xs, bytes(OP, x_rows(pairs, topk), self.in_p)?)?;
        let y_len = bytes(OP, bytes(OP, pairs, self.out_p)?, 4)?;
        check_len(OP, "y", y, y_len)?;
        let Some(&k) = self.ks.iter().max() else { return Ok(()) };
        if pairs == 0 {
            return Ok(());
        }
        let tiles = split_tiles(self.in_p, self.out_p, pairs);
        let ints = [self.count, topk, self.in_p, self.out_p, tiles].map(|v| as_i32(OP, "a launch parameter", v));
        let [experts, topk_i, in_i, out_i, st] = ints;
        let (experts, topk_i, in_i, out_i, st) = (experts?, topk_i?, in_i?, out_i?, st?);
        gpu.stream().memset_zeros(&mut y.dev_mut().slice_mut(0..y_len)).doing(|| format!("zeroing {OP}'s y"))?;
        let f = fast_fn(gpu, OP, k, self.codebook)?;
        let ids_at = ids.dev().device_ptr(gpu.stream()).0;
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(xs.dev()).arg(self.table.dev()).arg(&ids_at).arg(&experts).arg(&topk_i).arg(y.dev_mut());
        launch.arg(&in_i).arg(&out_i).arg(&st);
        let blocks = ((self.out_p / 16).div_ceil(WARPS * WARP_COLS), (self.in_p / 16).div_ceil(tiles), pairs);
        let cfg = grid3(blocks, 32 * WARPS as u32, 0);
        // SAFETY: arguments match exl3_mul1_bytedot's signature; ids, xs and y were checked above, the table is this one's.
        unsafe { launch.launch(cfg) }
            .doing(|| format!("launching {OP} on {pairs} jobs of {}×{}", self.in_p, self.out_p))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exl3::encode::random_weight;
    use crate::exl3::trellis::{state_at, tile_perm};
    use tf_core::rng::SplitMix64;

    #[test]
    fn bytedot_matches_states_read_straight_from_the_stream() {
        let mut rng = SplitMix64::new(7);
        for k in 1..=8 {
            let w = random_weight(&mut rng, (32, 48, k), Codebook::Mul1, 1.0);
            let a: Vec<i8> = (0..32).map(|_| rng.next_u64() as i8).collect();
            let (tn, perm) = (w.out_p / 16, tile_perm());
            let mut want = vec![0i64; w.out_p];
            for (t, rec) in w.trellis.chunks_exact(16 * k).enumerate() {
                for (p, &cell) in perm.iter().enumerate() {
                    let (r, c) = (16 * (t / tn) + usize::from(cell) / 16, 16 * (t % tn) + usize::from(cell) % 16);
                    want[c] += i64::from(a[r]) * i64::from(mul1_bytesum(state_at(rec, k, p)));
                }
            }
            let got: Vec<i64> = bytedot_cpu(&w, &a).into_iter().map(i64::from).collect();
            assert_eq!(got, want, "K = {k}");
        }
    }

    #[test]
    fn bytesum_is_the_codebook_value_before_its_affine_map() {
        // MUL1's value is fp16((1024 + s)·k_inv + k_bias): it must rise with the byte sum s.
        let mut by_sum: Vec<(u32, f32)> = (0..=u16::MAX).map(|s| (mul1_bytesum(s), Codebook::Mul1.value(s))).collect();
        by_sum.sort_by_key(|p| p.0);
        assert!(by_sum.windows(2).all(|p| p[0].0 == p[1].0 && p[0].1 == p[1].1 || p[0].0 < p[1].0 && p[0].1 <= p[1].1));
        assert!(by_sum.last().unwrap().0 <= 1020);
    }

    #[test]
    fn acts_pack_in_lane_order_and_splits_cover_the_input() {
        let a: Vec<i8> = (0..32).map(|i| i as i8 - 16).collect();
        let xs = pack_acts(&a, 32);
        assert_eq!(xs.len(), 32);
        assert_eq!(xs[4..8], [-14i8, -13, -6, -5].map(|v| u32::from(v as u8) * 0x0101_0101));
        for (in_p, out_p, jobs) in [(5120, 2304, 1), (5120, 2304, 12), (2304, 5120, 7), (16, 16, 1), (256, 384, 3)] {
            let t = split_tiles(in_p, out_p, jobs);
            assert!(t >= 1 && t <= in_p / 16, "{in_p}×{out_p}: {t}");
        }
        assert_eq!(split_tiles(5120, 2304, 12), 8);
    }
}
