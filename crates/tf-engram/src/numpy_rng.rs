//! numpy's `default_rng(seed).integers(..., dtype=int64)` ported from numpy's algorithms: `SeedSequence`, `PCG64`, Lemire bounded draws.

const POOL_SIZE: usize = 4;
const XSHIFT: u32 = 16;
const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;

/// numpy's PCG64 multiplier (PCG's default 128-bit multiplier).
pub const PCG64_MULTIPLIER: u128 = 0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645;

/// numpy's `SeedSequence(entropy)` with the default pool of four u32 words and no spawn key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedSequence {
    pool: [u32; POOL_SIZE],
}

/// numpy splits a Python int into little-endian u32 words, and 0 into one zero word rather than none.
pub fn int_to_words(mut n: u128) -> Vec<u32> {
    let mut words = Vec::new();
    while n > 0 || words.is_empty() {
        words.push(n as u32);
        n >>= 32;
    }
    words
}

fn mix(x: u32, y: u32) -> u32 {
    let r = MIX_MULT_L.wrapping_mul(x).wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    r ^ (r >> XSHIFT)
}

impl SeedSequence {
    /// The sequence numpy builds from a non-negative integer seed.
    pub fn new(entropy: u128) -> SeedSequence {
        SeedSequence::from_words(&int_to_words(entropy))
    }

    /// The sequence from entropy already split into u32 words (numpy's `mix_entropy`).
    pub fn from_words(entropy: &[u32]) -> SeedSequence {
        let mut hash_const = INIT_A;
        let mut hashmix = |value: u32| {
            let v = value ^ hash_const;
            hash_const = hash_const.wrapping_mul(MULT_A);
            let v = v.wrapping_mul(hash_const);
            v ^ (v >> XSHIFT)
        };
        let mut pool = [0u32; POOL_SIZE];
        for (i, word) in pool.iter_mut().enumerate() {
            *word = hashmix(entropy.get(i).copied().unwrap_or(0));
        }
        // Every pool word is mixed into every other so late words affect early ones; the hash constant runs on throughout.
        for src in 0..POOL_SIZE {
            for dst in (0..POOL_SIZE).filter(|&dst| dst != src) {
                pool[dst] = mix(pool[dst], hashmix(pool[src]));
            }
        }
        for &extra in entropy.iter().skip(POOL_SIZE) {
            for word in pool.iter_mut() {
                *word = mix(*word, hashmix(extra));
            }
        }
        SeedSequence { pool }
    }

    /// The mixed entropy pool (numpy's `SeedSequence.pool`).
    pub fn pool(&self) -> [u32; POOL_SIZE] {
        self.pool
    }

    /// numpy's `generate_state(n_words, np.uint32)`.
    pub fn generate_state_u32(&self, n_words: usize) -> Vec<u32> {
        let mut hash_const = INIT_B;
        (0..n_words)
            .map(|i| {
                let v = self.pool[i % POOL_SIZE] ^ hash_const;
                hash_const = hash_const.wrapping_mul(MULT_B);
                let v = v.wrapping_mul(hash_const);
                v ^ (v >> XSHIFT)
            })
            .collect()
    }

    /// numpy's `generate_state(n_words, np.uint64)`: pairs of u32 words read as little-endian u64s.
    pub fn generate_state_u64(&self, n_words: usize) -> Vec<u64> {
        let words = self.generate_state_u32(2 * n_words);
        words.chunks_exact(2).map(|w| u64::from(w[0]) | (u64::from(w[1]) << 32)).collect()
    }
}

/// numpy's `PCG64` bit generator, including the spare half-word its 32-bit draws keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
    spare_u32: Option<u32>,
}

impl Pcg64 {
    /// PCG's `srandom_r`: the increment is `initseq·2 + 1`, then step, add `initstate`, step.
    pub fn new(initstate: u128, initseq: u128) -> Pcg64 {
        let mut rng = Pcg64 { state: 0, inc: (initseq << 1) | 1, spare_u32: None };
        rng.step();
        rng.state = rng.state.wrapping_add(initstate);
        rng.step();
        rng
    }

    /// numpy's `PCG64(seed)`: four u64s from the seed sequence, read as (state hi, lo, seq hi, lo).
    pub fn from_seed_sequence(seq: &SeedSequence) -> Pcg64 {
        let v = seq.generate_state_u64(4);
        let join = |hi: u64, lo: u64| (u128::from(hi) << 64) | u128::from(lo);
        Pcg64::new(join(v[0], v[1]), join(v[2], v[3]))
    }

    /// numpy's `default_rng(seed)` bit generator for a non-negative integer seed.
    pub fn from_seed(seed: u128) -> Pcg64 {
        Pcg64::from_seed_sequence(&SeedSequence::new(seed))
    }

    /// The LCG state and increment (numpy's `bit_generator.state["state"]`).
    pub fn state(&self) -> (u128, u128) {
        (self.state, self.inc)
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG64_MULTIPLIER).wrapping_add(self.inc);
    }

    /// One raw draw (numpy's `random_raw()`): step first, then XSL-RR of the new state.
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let s = self.state;
        ((s >> 64) as u64 ^ s as u64).rotate_right((s >> 122) as u32)
    }

    /// numpy's `next_uint32`: the low half of a fresh u64, keeping the high half for the next call.
    pub fn next_u32(&mut self) -> u32 {
        if let Some(word) = self.spare_u32.take() {
            return word;
        }
        let x = self.next_u64();
        self.spare_u32 = Some((x >> 32) as u32);
        x as u32
    }

    fn lemire_u32(&mut self, rng: u32) -> u32 {
        let excl = rng + 1;
        let mut m = u64::from(self.next_u32()) * u64::from(excl);
        // numpy only computes the exact threshold (2^32 mod excl) when the cheap bound says a rejection is possible.
        if (m as u32) < excl {
            let threshold = (u32::MAX - rng) % excl;
            while (m as u32) < threshold {
                m = u64::from(self.next_u32()) * u64::from(excl);
            }
        }
        (m >> 32) as u32
    }

    fn lemire_u64(&mut self, rng: u64) -> u64 {
        let excl = rng + 1;
        let mut m = u128::from(self.next_u64()) * u128::from(excl);
        if (m as u64) < excl {
            let threshold = (u64::MAX - rng) % excl;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(excl);
            }
        }
        (m >> 64) as u64
    }

    /// numpy's `random_bounded_uint64_fill` without masking: `off + [0, rng]`, the generator the span needs.
    pub fn bounded_fill(&mut self, off: u64, rng: u64, out: &mut [u64]) {
        for slot in out.iter_mut() {
            let draw = match rng {
                0 => 0,
                0xFFFF_FFFF => u64::from(self.next_u32()),
                r if r < 0xFFFF_FFFF => u64::from(self.lemire_u32(r as u32)),
                u64::MAX => self.next_u64(),
                r => self.lemire_u64(r),
            };
            *slot = off.wrapping_add(draw);
        }
    }
}

/// numpy's `Generator.integers(low, high, size, dtype=np.int64, endpoint)`; `None` where numpy raises (empty range).
pub fn integers_i64(bits: &mut Pcg64, low: i64, high: i64, endpoint: bool, size: usize) -> Option<Vec<i64>> {
    let high = if endpoint { high } else { high.checked_sub(1)? };
    if low > high {
        return None;
    }
    let mut out = vec![0u64; size];
    bits.bounded_fill(low as u64, high.wrapping_sub(low) as u64, &mut out);
    Some(out.into_iter().map(|x| x as i64).collect())
}
