//! Independent brute-force oracles shared by the format tests.

/// Nearest finite code to `x` among `table` (same sign as `x`), ties to the even code; NaN table entries skipped.
pub fn brute_nearest(x: f32, table: &[f32], sign_bit: u8) -> u8 {
    let neg = x.is_sign_negative();
    let mut best: Option<(f64, u8)> = None;
    for (c, &v) in table.iter().enumerate() {
        let c = c as u8;
        if v.is_nan() || ((c & sign_bit) != 0) != neg {
            continue;
        }
        let d = (x as f64 - v as f64).abs();
        best = match best {
            None => Some((d, c)),
            Some((bd, bc)) if d < bd || (d == bd && c & 1 == 0 && bc & 1 == 1) => Some((d, c)),
            keep => keep,
        };
    }
    best.expect("table has a code of each sign").1
}
