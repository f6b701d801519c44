//! f32 `exp` and `ln_1p` as a fixed sequence of IEEE f64 operations, spelled alike in tf-dsv41's `kernels/common.cuh`: libm's differ by platform.

const LOG2_E: f64 = std::f64::consts::LOG2_E;
const LN_2: f64 = std::f64::consts::LN_2;
/// Degree of the Taylor polynomial of e^r on |r| ≤ ln2/2: its truncation error is below 2^-40 relative.
const EXP_DEGREE: u32 = 11;
/// Odd terms of 2·atanh(s) kept for |s| ≤ 0.1716 (m in [√½, √2)): the truncation error is below 2^-45.
const LOG_TERMS: u32 = 8;

/// e^x rounded to f32 once from an f64 value within 2^-40 of the true result.
pub fn exp(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > 89.0 {
        return f32::INFINITY;
    }
    if x < -110.0 {
        return 0.0;
    }
    let (k, r) = reduce(x);
    let mut p = 1.0f64;
    for n in (1..=EXP_DEGREE).rev() {
        p = 1.0 + r / n as f64 * p;
    }
    (p * pow2(k as i64)) as f32
}

/// `x` as `exp` reduces it: k = round(x·log2 e) and r = x − k·ln2.
fn reduce(x: f32) -> (f64, f64) {
    let xd = x as f64;
    let k = (xd * LOG2_E).round();
    (k, xd - k * LN_2)
}

/// `r / n` as `exp` divides, from `inv` = RN(1/n): q = r·inv, then Markstein's correction; the division's bits for every f32 input (`examples/exp_quotients.rs`), issued far faster on a GPU.
pub fn quotient_by_reciprocal(r: f64, n: f64, inv: f64) -> f64 {
    let q = r * inv;
    (-q).mul_add(n, r).mul_add(inv, q)
}

/// The first Taylor step `n` of `exp(x)` whose `quotient_by_reciprocal` differs from the division `r / n`, if any.
pub fn exp_quotient_mismatch(x: f32) -> Option<u32> {
    let r = reduce(x).1;
    (1..=EXP_DEGREE).find(|&n| {
        let n = f64::from(n);
        quotient_by_reciprocal(r, n, 1.0 / n).to_bits() != (r / n).to_bits()
    })
}

/// ln(1 + x) rounded to f32 once from an f64 value within 2^-44 of the true result.
pub fn ln_1p(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        return x;
    }
    if x < -1.0 {
        return f32::NAN;
    }
    if x == -1.0 {
        return f32::NEG_INFINITY;
    }
    let xd = x as f64;
    // Below 2^-29, 1 + x would round in f64; x − x²/2 is then exact to far beyond f32.
    if xd.abs() < 1.0 / (1u64 << 29) as f64 {
        return (xd - xd * xd / 2.0) as f32;
    }
    (ln_f64(1.0 + xd)) as f32
}

/// ln(u) for a normal positive u: u = 2^e·m with m in [√½, √2), ln m = 2·atanh((m−1)/(m+1)) by its series.
fn ln_f64(u: f64) -> f64 {
    let bits = u.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | (1023u64 << 52));
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p = 0.0f64;
    for n in (0..LOG_TERMS).rev() {
        p = p * s2 + 1.0 / (2 * n + 1) as f64;
    }
    e as f64 * LN_2 + 2.0 * s * p
}

/// 2^k as an f64 for -1022 ≤ k ≤ 1023, built from its exponent bits (exact).
fn pow2(k: i64) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_is_within_one_ulp_of_f64_and_mostly_exact() {
        let (mut off, n) = (0, 200_000);
        for i in 0..n {
            let x = -104.0 + 192.0 * (i as f32 / n as f32);
            let (ours, wide) = (exp(x), (x as f64).exp() as f32);
            assert!(ulps(ours, wide) <= 1, "exp({x}) = {ours}, f64 says {wide}");
            off += (ours != wide) as usize;
        }
        assert!(off < n / 10_000, "{off} of {n} differ from the f64 rounding");
    }

    #[test]
    fn exp_quotients_by_reciprocal_equal_the_divisions() {
        // Every 4,099th f32 of exp's domain; examples/exp_quotients.rs checks all of them.
        let (lo, hi) = ((-110.0f32).to_bits(), 89.0f32.to_bits());
        let xs = (0..hi).step_by(4099).chain((1u32 << 31..=lo).step_by(4099)).map(f32::from_bits);
        let mut checked = 0;
        for x in xs {
            assert_eq!(exp_quotient_mismatch(x), None, "x = {x}: r / n");
            checked += 1;
        }
        assert!(checked > 500_000, "{checked} inputs");
    }

    #[test]
    fn exp_edges() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(88.7), (88.7f32 as f64).exp() as f32);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(-103.3), (-103.3f32 as f64).exp() as f32);
        assert!(exp(-103.0) > 0.0);
    }

    #[test]
    fn ln_1p_is_within_one_ulp_of_f64_and_mostly_exact() {
        let (mut off, n) = (0, 200_000);
        for i in 0..n {
            let t = i as f64 / n as f64;
            let x = (-0.999 + 10f64.powf(-12.0 + 22.0 * t)) as f32;
            let (ours, wide) = (ln_1p(x), (x as f64).ln_1p() as f32);
            assert!(ulps(ours, wide) <= 1, "ln_1p({x}) = {ours}, f64 says {wide}");
            off += (ours != wide) as usize;
        }
        assert!(off < n / 10_000, "{off} of {n} differ from the f64 rounding");
        for x in [1e-30f32, -1e-20, 3e-9, 1e-10] {
            assert_eq!(ln_1p(x), (x as f64).ln_1p() as f32, "ln_1p({x})");
        }
    }

    #[test]
    fn ln_1p_edges() {
        assert_eq!(ln_1p(0.0), 0.0);
        assert_eq!(ln_1p(-1.0), f32::NEG_INFINITY);
        assert!(ln_1p(-1.5).is_nan());
        assert!(ln_1p(f32::NAN).is_nan());
        assert_eq!(ln_1p(f32::INFINITY), f32::INFINITY);
        assert_eq!(ln_1p(f32::MAX), (f32::MAX as f64).ln_1p() as f32);
    }
}
