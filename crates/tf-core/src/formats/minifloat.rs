//! Round-to-nearest-even encoding of f32 into small float formats that have no infinities.

/// Layout of a small float: one sign bit, `man_bits` mantissa bits, exponent `bias`, largest finite code.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MiniFloat {
    pub man_bits: u32,
    pub bias: i32,
    pub max_code: u32,
}

impl MiniFloat {
    /// Magnitude code of `a >= 0` rounded to nearest, ties to even, saturating at `max_code`.
    pub(crate) fn encode_magnitude(self, a: f32) -> u32 {
        debug_assert!(!a.is_nan() && a >= 0.0);
        let bits = a.to_bits();
        let f32_exp = ((bits >> 23) & 0xff) as i32;
        // Zero and f32 subnormals lie far below half the smallest subnormal of every target format.
        if f32_exp == 0 {
            return 0;
        }
        let emin = 1 - self.bias;
        let emax = (self.max_code >> self.man_bits) as i32 - self.bias;
        let e = (f32_exp - 127).max(emin);
        if e > emax + 1 {
            return self.max_code;
        }
        let quantum = f32::from_bits(((127 + e - self.man_bits as i32) as u32) << 23);
        // Dividing by a power of two is exact, so only the integer rounding below rounds.
        let n = (a / quantum).round_ties_even() as u32;
        let code = (((e - emin) as u32) << self.man_bits) + n;
        code.min(self.max_code)
    }

    /// Magnitude of a code, `man_bits` mantissa with subnormals at exponent field zero.
    pub(crate) const fn decode_magnitude(self, code: u32) -> f32 {
        let m = self.man_bits;
        let field = (code >> m) as i32;
        let man = (code & ((1 << m) - 1)) as f32 / (1u32 << m) as f32;
        if field == 0 { man * pow2(1 - self.bias) } else { (1.0 + man) * pow2(field - self.bias) }
    }
}

/// 2^e for e in the normal f32 exponent range, exactly.
pub(crate) const fn pow2(e: i32) -> f32 {
    f32::from_bits(((127 + e) as u32) << 23)
}
