//! Every f32 in `ops::math::exp`'s domain (2.2 billion, over the cores): each Taylor quotient `r / n` equals `quotient_by_reciprocal`, bit for bit.

use tf_core::ops::math::exp_quotient_mismatch;

fn main() {
    let (lo, hi) = ((-110.0f32).to_bits(), 89.0f32.to_bits());
    // The positive inputs up to 89, then the negative ones down to -110 (sign bit set), as bit ranges.
    let ranges = [(0u64, u64::from(hi)), (1u64 << 31, u64::from(lo))];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let t = std::time::Instant::now();
    let (checked, bad) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                s.spawn(move || {
                    let (mut checked, mut bad) = (0u64, Vec::new());
                    for &(a, b) in &ranges {
                        let mut bits = a + i;
                        while bits <= b {
                            if let Some(n) = exp_quotient_mismatch(f32::from_bits(bits as u32)) {
                                bad.push((bits as u32, n));
                            }
                            checked += 1;
                            bits += threads;
                        }
                    }
                    (checked, bad)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("a checker thread")).fold((0, Vec::new()), |(c, mut b), (c2, b2)| {
            b.extend(b2);
            (c + c2, b)
        })
    });
    println!(
        "exp_quotients: {checked} inputs × 11 quotients in {:.0} s, {} differ",
        t.elapsed().as_secs_f64(),
        bad.len()
    );
    for (bits, n) in bad.iter().take(20) {
        println!("  x = {} (0x{bits:08x}), first at n = {n}", f32::from_bits(*bits));
    }
    std::process::exit(i32::from(!bad.is_empty()));
}
