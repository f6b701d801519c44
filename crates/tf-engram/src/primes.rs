//! Bucket primes (spec §10.1 step 3): a deterministic primality test and the globally unique prime sequence.

/// Miller–Rabin bases that decide every u64 exactly (the first 12 primes suffice below 3.3e24).
const BASES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];

fn mul_mod(a: u64, b: u64, m: u64) -> u64 {
    ((u128::from(a) * u128::from(b)) % u128::from(m)) as u64
}

fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut acc = 1 % m;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = mul_mod(acc, base, m);
        }
        base = mul_mod(base, base, m);
        exp >>= 1;
    }
    acc
}

/// Exact primality for any u64 (deterministic Miller–Rabin).
pub fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    for p in BASES {
        if n.is_multiple_of(p) {
            return n == p;
        }
    }
    let (mut d, mut s) = (n - 1, 0u32);
    while d.is_multiple_of(2) {
        d /= 2;
        s += 1;
    }
    'bases: for a in BASES {
        let mut x = pow_mod(a, d, n);
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..s {
            x = mul_mod(x, x, n);
            if x == n - 1 {
                continue 'bases;
            }
        }
        return false;
    }
    true
}

/// The smallest prime strictly above `n`, or `None` if it would not fit in u64.
pub fn next_prime(n: u64) -> Option<u64> {
    let mut c = n.checked_add(1)?;
    while !is_prime(c) {
        c = c.checked_add(1)?;
    }
    Some(c)
}

/// `count` consecutive primes above `engram_vocab_size − 1`; the reference's restart-and-skip-seen search yields exactly these.
pub fn bucket_primes(engram_vocab_size: u64, count: usize) -> Option<Vec<u64>> {
    let mut out = Vec::with_capacity(count);
    let mut current = engram_vocab_size.checked_sub(1)?;
    for _ in 0..count {
        current = next_prime(current)?;
        out.push(current);
    }
    Some(out)
}
