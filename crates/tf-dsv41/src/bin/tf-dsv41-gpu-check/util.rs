//! Shared by the op checks: random inputs that are never zero, poisoned outputs, and comparisons where NaN fails.

use tf_core::bf16;
use tf_core::rng::SplitMix64;
use tf_cuda::{Error, Gpu, PoolBuf};

/// A NaN bit pattern every output starts as, so an element the kernel never wrote fails.
pub const BF16_POISON: u16 = 0xFFFF;
pub const F32_POISON: f32 = f32::NAN;

/// `n` normal values times `scale`, none smaller in magnitude than `scale / 1000`.
pub fn normals(rng: &mut SplitMix64, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let v = rng.normal();
            let v = if v.abs() < 1e-3 { 1e-3f32.copysign(v) } else { v };
            v * scale
        })
        .collect()
}

/// [`normals`] rounded to bf16.
pub fn bf16s(rng: &mut SplitMix64, n: usize, scale: f32) -> Vec<bf16> {
    normals(rng, n, scale).into_iter().map(bf16::from_f32).collect()
}

/// A pooled buffer of `n` bf16 poison values.
pub fn poisoned_bf16(gpu: &Gpu, n: usize) -> Result<PoolBuf<'_>, Error> {
    gpu.upload(&vec![BF16_POISON; n])
}

/// A pooled buffer of `n` f32 NaNs.
pub fn poisoned_f32(gpu: &Gpu, n: usize) -> Result<PoolBuf<'_>, Error> {
    gpu.upload(&vec![F32_POISON; n])
}

/// bf16 values of a buffer.
pub fn download_bf16(gpu: &Gpu, buf: &PoolBuf<'_>) -> Result<Vec<bf16>, Error> {
    Ok(gpu.download::<u16>(buf)?.into_iter().map(bf16::from_bits).collect())
}

/// Distance in bf16 ulps along the number line (±0 equal); `None` when either is NaN.
pub fn bf16_ulps(a: bf16, b: bf16) -> Option<u32> {
    if a.is_nan() || b.is_nan() {
        return None;
    }
    let ordered = |v: bf16| {
        let bits = i32::from(v.to_bits());
        if bits & 0x8000 != 0 { -(bits & 0x7FFF) } else { bits }
    };
    Some(ordered(a).abs_diff(ordered(b)))
}

/// How far a GPU output is from the CPU's: worst ulps (bf16) or relative error (f32), differing count, NaN count.
#[derive(Clone, Copy, Debug, Default)]
pub struct Diff {
    pub worst: f64,
    pub differing: usize,
    pub nans: usize,
    pub len: usize,
}

impl Diff {
    /// Within `tolerance`, the same length, and no NaN.
    pub fn pass(&self, tolerance: f64) -> bool {
        self.nans == 0 && self.worst <= tolerance
    }

    pub fn describe(&self, unit: &str) -> String {
        format!("worst {:.3e} {unit}, {} of {} differ, {} NaN", self.worst, self.differing, self.len, self.nans)
    }
}

/// bf16 outputs in ulps; a length mismatch counts every element as NaN.
pub fn diff_bf16(got: &[bf16], want: &[bf16]) -> Diff {
    if got.len() != want.len() {
        return Diff { worst: f64::INFINITY, differing: got.len(), nans: got.len().max(1), len: want.len() };
    }
    let mut d = Diff { len: want.len(), ..Diff::default() };
    for (g, w) in got.iter().zip(want) {
        match bf16_ulps(*g, *w) {
            None => d.nans += 1,
            Some(u) if u > 0 => {
                d.differing += 1;
                d.worst = d.worst.max(f64::from(u));
            }
            Some(_) => {}
        }
    }
    d
}

/// f32 outputs as `|got − want| / max(|want|, floor)`; NaN on either side counts as NaN.
pub fn diff_f32(got: &[f32], want: &[f32], floor: f32) -> Diff {
    if got.len() != want.len() {
        return Diff { worst: f64::INFINITY, differing: got.len(), nans: got.len().max(1), len: want.len() };
    }
    let mut d = Diff { len: want.len(), ..Diff::default() };
    for (g, w) in got.iter().zip(want) {
        if g.is_nan() || w.is_nan() {
            d.nans += 1;
        } else if g != w {
            d.differing += 1;
            d.worst = d.worst.max(f64::from((g - w).abs() / w.abs().max(floor)));
        }
    }
    d
}
