//! Checkpoint storage formats from f32 values: FP8 with 32×32-tile or per-row-32 E8M0 scales, packed FP4 experts.

use tf_core::formats::{
    E2M1_MAX, E4M3_MAX, e2m1_to_f32, e4m3_to_f32, e8m0_to_f32, f32_to_e2m1, f32_to_e4m3, fast_round_scale, pack_fp4,
    pow2_scale_to_e8m0, unpack_fp4,
};

/// Block edge of every weight scale in a V4.1 checkpoint.
pub const BLOCK: usize = 32;

/// The reference's amax floor, so an all-zero block still gets a finite scale.
const AMAX_FLOOR: f32 = 1e-4;

/// 2^ceil(log2(amax / max)) as the reference's `fast_round_scale`, so the block's largest value lands in range.
fn block_scale(amax: f32, max: f32) -> f32 {
    fast_round_scale(amax.max(AMAX_FLOOR), 1.0 / max)
}

/// FP8 e4m3 codes of a row-major `[rows, cols]` matrix and its E8M0 scales, one per 32×32 tile (partial tiles at the edges).
pub fn quant_fp8_tiles(w: &[f32], rows: usize, cols: usize) -> (Vec<u8>, Vec<u8>) {
    assert_eq!(w.len(), rows * cols, "fp8 tiles: value count");
    let (rb, cb) = (rows.div_ceil(BLOCK), cols.div_ceil(BLOCK));
    let mut codes = vec![0u8; rows * cols];
    let mut scales = vec![0u8; rb * cb];
    for bi in 0..rb {
        let rs = bi * BLOCK..((bi + 1) * BLOCK).min(rows);
        for bj in 0..cb {
            let cs = bj * BLOCK..((bj + 1) * BLOCK).min(cols);
            let amax = rs
                .clone()
                .flat_map(|r| w[r * cols + cs.start..r * cols + cs.end].iter())
                .fold(0f32, |m, x| m.max(x.abs()));
            let s = block_scale(amax, E4M3_MAX);
            scales[bi * cb + bj] = pow2_scale_to_e8m0(s);
            for r in rs.clone() {
                for c in cs.clone() {
                    codes[r * cols + c] = f32_to_e4m3(w[r * cols + c] / s);
                }
            }
        }
    }
    (codes, scales)
}

/// FP8 e4m3 codes with E8M0 scales per row and 32 columns: the Engram table layout, `cols` a multiple of 32.
pub fn quant_fp8_rows(w: &[f32], rows: usize, cols: usize) -> (Vec<u8>, Vec<u8>) {
    assert!(w.len() == rows * cols && cols.is_multiple_of(BLOCK), "fp8 rows: shape");
    per_block(w, E4M3_MAX, f32_to_e4m3)
}

/// Packed E2M1 codes (`[rows, cols/2]`, even element in the low nibble) and E8M0 scales per row and 32 columns.
pub fn quant_fp4(w: &[f32], rows: usize, cols: usize) -> (Vec<u8>, Vec<u8>) {
    assert!(w.len() == rows * cols && cols.is_multiple_of(BLOCK), "fp4: shape");
    let (codes, scales) = per_block(w, E2M1_MAX, f32_to_e2m1);
    (pack_fp4(&codes), scales)
}

/// Each run of 32 values: its E8M0 power-of-two scale for a format whose largest value is `max`, and its codes.
fn per_block(w: &[f32], max: f32, code: impl Fn(f32) -> u8) -> (Vec<u8>, Vec<u8>) {
    let mut codes = Vec::with_capacity(w.len());
    let mut scales = Vec::with_capacity(w.len() / BLOCK);
    for g in w.chunks_exact(BLOCK) {
        let s = block_scale(g.iter().fold(0f32, |m, x| m.max(x.abs())), max);
        scales.push(pow2_scale_to_e8m0(s));
        codes.extend(g.iter().map(|x| code(x / s)));
    }
    (codes, scales)
}

/// Values of an FP8 matrix with 32×32-tile scales.
pub fn dequant_fp8_tiles(codes: &[u8], scales: &[u8], rows: usize, cols: usize) -> Vec<f32> {
    let cb = cols.div_ceil(BLOCK);
    (0..rows * cols)
        .map(|i| {
            let (r, c) = (i / cols, i % cols);
            e4m3_to_f32(codes[i]) * e8m0_to_f32(scales[(r / BLOCK) * cb + c / BLOCK])
        })
        .collect()
}

/// Values of an FP8 matrix with per-row-32 scales (Engram tables).
pub fn dequant_fp8_rows(codes: &[u8], scales: &[u8]) -> Vec<f32> {
    codes.iter().enumerate().map(|(i, &q)| e4m3_to_f32(q) * e8m0_to_f32(scales[i / BLOCK])).collect()
}

/// Values of a packed FP4 matrix with per-row-32 scales.
pub fn dequant_fp4(packed: &[u8], scales: &[u8]) -> Vec<f32> {
    unpack_fp4(packed).iter().enumerate().map(|(i, &c)| e2m1_to_f32(c) * e8m0_to_f32(scales[i / BLOCK])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_scale_puts_the_block_max_in_the_top_binade() {
        let mut w = vec![0.01f32; 40 * 33];
        w[5] = -3.0;
        let (codes, scales) = quant_fp8_tiles(&w, 40, 33);
        assert_eq!(scales.len(), 2 * 2);
        assert_eq!(e8m0_to_f32(scales[0]), 2f32.powi(-7), "3/448 rounds up to 2^-7");
        assert_eq!(e4m3_to_f32(codes[5]) * e8m0_to_f32(scales[0]), -3.0);
        let back = dequant_fp8_tiles(&codes, &scales, 40, 33);
        assert!(back.iter().zip(&w).all(|(a, b)| (a - b).abs() <= b.abs() / 16.0));
    }

    #[test]
    fn fp4_packs_even_elements_low() {
        let mut w = vec![0f32; 32];
        w[0] = 6.0;
        w[1] = -1.0;
        let (packed, scales) = quant_fp4(&w, 1, 32);
        assert_eq!(e8m0_to_f32(scales[0]), 1.0);
        assert_eq!(packed[0], 0x7 | (0xA << 4));
        assert_eq!(&dequant_fp4(&packed, &scales)[..2], &[6.0, -1.0]);
    }

    #[test]
    fn row_groups_have_their_own_scale() {
        let w: Vec<f32> = (0..64).map(|i| if i < 32 { 1.0 } else { 96.0 }).collect();
        let (codes, scales) = quant_fp8_rows(&w, 1, 64);
        assert_eq!(scales.len(), 2);
        assert_eq!(dequant_fp8_rows(&codes, &scales), w);
    }
}
