//! A seeded generator whose draws are bit-identical on every platform: synthetic weights and request sampling share it.

/// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state word, full period, good avalanche.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

/// 1 / std of the sum of four uniform 16-bit lanes, sqrt(12 / (4·(65536² − 1))) rounded to f32.
const INV_STD4: f32 = 2.642_899_8e-5;

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The stream of one tensor: independent of every other tensor, so adding a tensor shifts no other values.
    pub fn for_tensor(seed: u64, name: &str) -> SplitMix64 {
        let mut g = SplitMix64(seed ^ fnv1a(name.as_bytes()));
        let mixed = g.next_u64();
        SplitMix64(mixed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Approximately N(0, 1): Irwin–Hall of four 16-bit lanes, bounded at ±3.46 and free of libm calls.
    pub fn normal(&mut self) -> f32 {
        let r = self.next_u64();
        let lanes = (r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48);
        let centered = lanes as i64 - 2 * 0xFFFF;
        centered as f32 * INV_STD4
    }
}

/// FNV-1a, 64-bit: a fixed, portable hash of tensor names.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_has_unit_moments() {
        let mut g = SplitMix64::new(7);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| f64::from(g.normal())).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "var {var}");
    }

    #[test]
    fn known_first_draws() {
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF, "reference SplitMix64 output for seed 0");
    }
}
