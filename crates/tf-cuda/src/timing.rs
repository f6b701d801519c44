//! Timing helpers for GPU checks and benchmarks: medians, the copy-bandwidth ceiling, cold-L2 kernel times.

use crate::error::DriverResultExt;
use crate::{Error, Gpu, PoolBuf};

/// Bytes a timed kernel's inputs are spread over (several times the H200's 60 MB L2), so each run reads DRAM.
pub const ROTATE_BYTES: usize = 512 << 20;

/// Median of the samples (mean of the middle two for an even count); NaN when there are none.
pub fn median(samples: &[f32]) -> f32 {
    let mut s = samples.to_vec();
    s.sort_by(f32::total_cmp);
    match s.len() {
        0 => f32::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Milliseconds of `reps` device-to-device copies of `bytes` after `warmup` untimed ones, each timed by events.
pub fn copy_ms(gpu: &Gpu, bytes: usize, warmup: usize, reps: usize) -> Result<Vec<f32>, Error> {
    let src = gpu.pool().take(bytes)?;
    let mut dst = gpu.pool().take(bytes)?;
    let copy = |g: &Gpu, dst: &mut PoolBuf<'_>| {
        g.stream().memcpy_dtod(&src.view(), &mut dst.view_mut()).doing(|| format!("copying {bytes} bytes on GPU"))
    };
    for _ in 0..warmup {
        copy(gpu, &mut dst)?;
    }
    let ms = (0..reps).map(|_| gpu.time_ms(|g| copy(g, &mut dst))).collect::<Result<Vec<_>, _>>()?;
    drop((src, dst));
    gpu.pool().release_free()?;
    Ok(ms)
}

/// How many copies of `bytes` of inputs exceed [`ROTATE_BYTES`] (at least 2, at most 512).
pub fn copies_for(bytes: usize) -> usize {
    ROTATE_BYTES.div_ceil(bytes.max(1)).clamp(2, 512)
}

/// `copies` device copies of `src` (copied on the GPU), so timed runs can rotate through them.
pub fn replicate<'g>(gpu: &'g Gpu, src: &PoolBuf<'g>, copies: usize) -> Result<Vec<PoolBuf<'g>>, Error> {
    (0..copies)
        .map(|_| {
            let mut dst = gpu.pool().take(src.len())?;
            gpu.stream().memcpy_dtod(&src.view(), &mut dst.view_mut()).doing(|| "replicating a timing input".into())?;
            Ok(dst)
        })
        .collect()
}

/// Median ms per `f(gpu, i)`, replayed from one graph over all copies: no host launch cost, and L2 stays cold.
pub fn cold_median_ms(
    gpu: &Gpu,
    copies: usize,
    reps: usize,
    mut f: impl FnMut(&Gpu, usize) -> Result<(), Error>,
) -> Result<f32, Error> {
    for i in 0..copies {
        f(gpu, i)?;
    }
    let graph = gpu.capture(|g| (0..copies).try_for_each(|i| f(g, i)))?;
    let replay = |_: &Gpu| graph.launch().doing(|| "replaying a timing graph".into());
    gpu.time_ms(replay)?;
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps.clamp(3, 20) {
        ms.push(gpu.time_ms(replay)? / copies as f32);
    }
    Ok(median(&ms))
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(super::median(&[]).is_nan());
        assert_eq!(super::copies_for(1 << 30), 2);
        assert_eq!(super::copies_for(16 << 20), 32);
    }
}
