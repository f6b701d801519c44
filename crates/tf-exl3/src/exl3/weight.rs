//! One EXL3 linear (quant.md §1.2–1.3): loaded from `<key>.trellis/suh/svh[/mcg|mul1][/bias]`, decoded exactly.

use super::codebook::{Codebook, MCG_MULT, MUL1_MULT};
use super::trellis::{tile_perm, tile_states};
use tf_core::formats::f16_bits_to_f32;
use tf_core::ops::qgemm::{expect_dtype, expect_shape};
use tf_core::{Checkpoint, DType, Error, Result, Tensor};

/// EXL3 pads both dims to this and applies its Hadamard transform in blocks of it.
pub const HAD: usize = 128;
/// Inputs per partial sum of [`Exl3Weight::forward`]: each split sums in order, then the splits add in order (the GPU runs splits in parallel).
pub const SPLIT: usize = 512;

/// A quantized `(in_p, out_p)` matrix (HF's `weight.T`): per 16×16 tile a K-bit trellis, plus the signed scales.
#[derive(Clone, Debug, PartialEq)]
pub struct Exl3Weight {
    pub in_p: usize,
    pub out_p: usize,
    /// Bits per weight of this tensor (1..=8).
    pub k: usize,
    pub codebook: Codebook,
    /// `[in_p/16][out_p/16][16K]` as stored.
    pub trellis: Vec<u16>,
    /// fp16 bits: input-side `suh [in_p]`, output-side `svh [out_p]`.
    pub suh: Vec<u16>,
    pub svh: Vec<u16>,
    pub bias: Option<Vec<f32>>,
}

fn bad(name: &str, msg: String) -> Error {
    Error::Invalid(format!("tensor `{name}`: {msg}"))
}

fn u16s(t: &Tensor) -> Vec<u16> {
    t.bytes().chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()
}

/// The codebook the markers select; a marker holding another multiplier than the locked one is refused.
fn codebook(ck: &Checkpoint, key: &str) -> Result<Codebook> {
    let marker = |suffix: &str, locked: u32| -> Result<bool> {
        let name = format!("{key}.{suffix}");
        if !ck.contains(&name) {
            return Ok(false);
        }
        let t = ck.get(&name)?;
        expect_dtype(&name, &t, &[DType::I32])?;
        if t.numel() != 1 {
            return Err(bad(&name, format!("a codebook marker is one int32, found shape {:?}", t.shape())));
        }
        let b = t.bytes();
        let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if v != locked {
            return Err(bad(&name, format!("multiplier {v:#010x}, but this codebook is locked to {locked:#010x}")));
        }
        Ok(true)
    };
    match (marker("mcg", MCG_MULT)?, marker("mul1", MUL1_MULT)?) {
        (true, true) => {
            Err(bad(&format!("{key}.mcg"), format!("`{key}.mul1` is present too: a tensor has one codebook")))
        }
        (true, false) => Ok(Codebook::Mcg),
        (false, true) => Ok(Codebook::Mul1),
        (false, false) => Ok(Codebook::Inst3),
    }
}

impl Exl3Weight {
    /// Loads the linear stored under `key` (e.g. `layers.3.ffn.experts.7.w1`), checking every tensor against the trellis.
    pub fn load(ck: &Checkpoint, key: &str) -> Result<Exl3Weight> {
        let name = format!("{key}.trellis");
        if !ck.contains(&name) && ck.contains(&format!("{key}.su")) {
            return Err(bad(
                &format!("{key}.su"),
                "the legacy packed-sign form (su/sv) is not supported; expected suh/svh".into(),
            ));
        }
        let t = ck.get(&name)?;
        expect_dtype(&name, &t, &[DType::I16, DType::U16])?;
        let &[tk, tn, words] = t.shape() else {
            return Err(bad(&name, format!("expected [in/16, out/16, 16·K], found shape {:?}", t.shape())));
        };
        if words % 16 != 0 || !(1..=8).contains(&(words / 16)) {
            return Err(bad(&name, format!("last dim {words} is not 16·K for K in 1..=8")));
        }
        let (in_p, out_p, k) = (tk * 16, tn * 16, words / 16);
        if in_p == 0 || out_p == 0 || in_p % HAD != 0 || out_p % HAD != 0 {
            return Err(bad(
                &name,
                format!("{in_p}×{out_p} is not a nonzero multiple of {HAD} in both dims (EXL3 pads to {HAD})"),
            ));
        }
        let scale = |suffix: &str, len: usize| -> Result<Vec<u16>> {
            let n = format!("{key}.{suffix}");
            let s = ck.get(&n)?;
            expect_dtype(&n, &s, &[DType::F16])?;
            expect_shape(&n, &s, &[len])?;
            Ok(u16s(&s))
        };
        let (suh, svh) = (scale("suh", in_p)?, scale("svh", out_p)?);
        let bias_name = format!("{key}.bias");
        let bias = if ck.contains(&bias_name) {
            let b = ck.get(&bias_name)?;
            expect_dtype(&bias_name, &b, &[DType::F16, DType::F32, DType::BF16])?;
            expect_shape(&bias_name, &b, &[out_p])?;
            Some(b.to_f32_vec()?)
        } else {
            None
        };
        Ok(Exl3Weight { in_p, out_p, k, codebook: codebook(ck, key)?, trellis: u16s(&t), suh, svh, bias })
    }

    /// The decoded trellis matrix `Q` as fp16 bits, `[in_p][out_p]` row-major: exact, tile by tile.
    pub fn decode_q(&self) -> Vec<u16> {
        let mut q = vec![0u16; self.in_p * self.out_p];
        self.for_each_state(|r, c, st| q[r * self.out_p + c] = self.codebook.decode(st));
        q
    }

    /// Calls `f(row, column, state)` for every position of Q, tile by tile.
    pub fn for_each_state(&self, mut f: impl FnMut(usize, usize, u16)) {
        let (tn, rec) = (self.out_p / 16, 16 * self.k);
        let perm = tile_perm();
        for (t, tile) in self.trellis.chunks_exact(rec).enumerate() {
            let (r0, c0) = (16 * (t / tn), 16 * (t % tn));
            for (&cell, st) in perm.iter().zip(tile_states(tile, self.k)) {
                f(r0 + usize::from(cell) / 16, c0 + usize::from(cell) % 16, st);
            }
        }
    }

    /// The effective weight `diag(suh)·H·Q·H·diag(svh)` as f32 `[in_p][out_p]` (H: normalized 128-blocks, f32 transforms).
    pub fn weight(&self) -> Vec<f32> {
        let (n, m) = (self.in_p, self.out_p);
        let mut w: Vec<f32> = self.decode_q().into_iter().map(f16_bits_to_f32).collect();
        let mut col = vec![0.0f32; n];
        for j in 0..m {
            (0..n).for_each(|i| col[i] = w[i * m + j]);
            fwht_blocks(&mut col);
            (0..n).for_each(|i| w[i * m + j] = col[i]);
        }
        for (i, row) in w.chunks_exact_mut(m).enumerate() {
            fwht_blocks(row);
            let s = f16_bits_to_f32(self.suh[i]);
            row.iter_mut().zip(&self.svh).for_each(|(v, &b)| *v *= s * f16_bits_to_f32(b));
        }
        w
    }

    /// `y = x·W_eff (+ bias)` for `rows` rows of `in_p` f32, as the kernels order it: Hadamard in, `·Q` by splits of [`SPLIT`], Hadamard out.
    pub fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        self.forward_q(&self.decode_q().into_iter().map(f16_bits_to_f32).collect::<Vec<f32>>(), x, rows)
    }

    /// [`Exl3Weight::forward`] with `Q` already decoded (as f32, `[in_p][out_p]`), for callers that keep it.
    pub fn forward_q(&self, q: &[f32], x: &[f32], rows: usize) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.in_p, "x holds {} values, expected {rows}×{}", x.len(), self.in_p);
        assert_eq!(
            q.len(),
            self.in_p * self.out_p,
            "Q holds {} values, expected {}×{}",
            q.len(),
            self.in_p,
            self.out_p
        );
        let mut y = vec![0.0f32; rows * self.out_p];
        let mut part = vec![0.0f32; self.out_p];
        for (xr, yr) in x.chunks_exact(self.in_p).zip(y.chunks_exact_mut(self.out_p)) {
            let mut xh: Vec<f32> = xr.iter().zip(&self.suh).map(|(v, &s)| v * f16_bits_to_f32(s)).collect();
            fwht_blocks(&mut xh);
            for (s, xs) in xh.chunks(SPLIT).enumerate() {
                part.fill(0.0);
                for (i, &a) in xs.iter().enumerate() {
                    let row = (s * SPLIT + i) * self.out_p;
                    part.iter_mut().zip(&q[row..row + self.out_p]).for_each(|(o, w)| *o += a * w);
                }
                yr.iter_mut().zip(&part).for_each(|(o, p)| *o += p);
            }
            fwht_blocks(yr);
            for (j, o) in yr.iter_mut().enumerate() {
                *o *= f16_bits_to_f32(self.svh[j]);
                if let Some(b) = &self.bias {
                    *o += b[j];
                }
            }
        }
        y
    }
}

/// The normalized Sylvester Hadamard transform (natural order, self-inverse) on each 128-block of `v`, in f32.
pub fn fwht_blocks(v: &mut [f32]) {
    let norm = 1.0 / (HAD as f32).sqrt();
    for block in v.chunks_exact_mut(HAD) {
        let mut h = 1;
        while h < HAD {
            for i in (0..HAD).step_by(2 * h) {
                for j in i..i + h {
                    let (a, b) = (block[j], block[j + h]);
                    block[j] = a + b;
                    block[j + h] = a - b;
                }
            }
            h *= 2;
        }
        block.iter_mut().for_each(|x| *x *= norm);
    }
}
