//! `exl3_gemv_exact`'s lane decode (`exact_sums`, `column_rows`, `state_at`) on the CPU: each lane reads its column's states in row order.

use tf_core::rng::SplitMix64;
use tf_exl3::exl3::trellis::{TILE, tile_perm, tile_states};

/// The kernel's `__funnelshift_lc(lo, hi, s)`: the high word of `hi:lo << min(s, 32)`.
fn funnel_lc(lo: u32, hi: u32, s: u32) -> u32 {
    ((((u64::from(hi) << 32) | u64::from(lo)) << s.min(32)) >> 32) as u32
}

/// The kernel's `state_at<O>`: the 16 bits at bit offset `o` of the words `v` (MSB first).
fn state_at(v: &[u32], o: usize) -> u32 {
    let (a, b) = (o / 32, (o % 32) as u32);
    match b {
        16 => v[a] & 0xFFFF,
        0..16 => (v[a] >> (16 - b)) & 0xFFFF,
        _ => funnel_lc(v[a + 1], v[a], b) >> 16,
    }
}

/// Lane `c`'s (0..16) states of one record, rows 0..15 of column c, as `exact_sums` and `column_rows` read them.
fn lane_column(words: &[u32], k: usize, c: usize) -> [u32; 16] {
    let nw = 8 * k;
    let (sh, wa) = ((4 * k * (c >> 3)) as u32, (c & 7) * k);
    let wm = (wa + nw - 1) % nw;
    let mut wv = vec![words[wm]];
    wv.extend((0..k).map(|i| words[wa + i]));
    let mut v: Vec<u32> = (0..k).map(|i| funnel_lc(wv[i + 1], wv[i], sh)).collect();
    v.push(funnel_lc(0, wv[k], sh));
    let mut rows = [0u32; 16];
    for u in 0..4 {
        let q = 8 * u;
        for (j, r) in [2 * u, 2 * u + 1, 2 * u + 8, 2 * u + 9].into_iter().enumerate() {
            rows[r] = state_at(&v, 16 + (q + j + 1) * k);
        }
    }
    rows
}

#[test]
fn every_lane_reads_its_columns_states_in_row_order_for_every_k() {
    let mut rng = SplitMix64::new(0xE3A);
    let perm = tile_perm();
    for k in 1..=8 {
        for trial in 0..64 {
            let rec: Vec<u16> = (0..16 * k).map(|_| rng.next_u64() as u16).collect();
            let words: Vec<u32> = rec.chunks_exact(2).map(|p| u32::from(p[0]) | u32::from(p[1]) << 16).collect();
            let states = tile_states(&rec, k);
            let mut want = [[0u32; 16]; 16];
            for p in 0..TILE {
                let cell = usize::from(perm[p]);
                want[cell % 16][cell / 16] = u32::from(states[p]);
            }
            for (c, col) in want.iter().enumerate() {
                assert_eq!(&lane_column(&words, k, c), col, "K={k}, record {trial}, lane column {c}");
            }
        }
    }
}

#[test]
fn the_funnel_shift_clamps_at_32_as_k8_high_columns_need() {
    assert_eq!(funnel_lc(0x1234_5678, 0x9abc_def0, 32), 0x1234_5678);
    assert_eq!(funnel_lc(0x8000_0000, 0x0000_0001, 1), 0x0000_0003);
    assert_eq!(funnel_lc(0xFFFF_FFFF, 0xABCD_EF01, 0), 0xABCD_EF01);
}
