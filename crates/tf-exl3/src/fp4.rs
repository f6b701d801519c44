//! DeepSeek's routed-expert FP4 weights: packed E2M1 pairs with one E8M0 scale per 32 along K.

use tf_core::formats::e8m0_to_f32;
use tf_core::ops::qgemm::{
    BlockScaledWeight, QBLOCK, QuantActs, expect_dtype, expect_shape, qgemm_bf16, qgemm_f32, weight_dims,
};
use tf_core::{Checkpoint, DType, Error, Result, Tensor, bf16};

/// An FP4 linear: `[out, in/2]` bytes (low nibble = even element) and `[out, in/32]` E8M0 scales, kept as tensors.
#[derive(Clone, Debug)]
pub struct Fp4Weight {
    out: usize,
    inp: usize,
    weight: Tensor,
    scale: Tensor,
}

impl Fp4Weight {
    /// Checks `{name}.weight` (I8 packed pairs, `[out, in/2]`) and `{name}.scale` (F8_E8M0 `[out, in/32]`).
    pub fn from_tensors(name: &str, weight: &Tensor, scale: &Tensor) -> Result<Fp4Weight> {
        let (wname, sname) = (format!("{name}.weight"), format!("{name}.scale"));
        expect_dtype(&wname, weight, &[DType::I8, DType::Fp4x2])?;
        let (out, inp) = weight_dims(&wname, weight, 2)?;
        expect_dtype(&sname, scale, &[DType::F8E8M0])?;
        expect_shape(&sname, scale, &[out, inp / QBLOCK])?;
        Ok(Fp4Weight { out, inp, weight: weight.clone(), scale: scale.clone() })
    }

    /// Loads `{name}.weight` and `{name}.scale` from a checkpoint without copying them.
    pub fn load(ckpt: &Checkpoint, name: &str) -> Result<Fp4Weight> {
        Fp4Weight::from_tensors(name, &ckpt.get(&format!("{name}.weight"))?, &ckpt.get(&format!("{name}.scale"))?)
    }

    pub fn out_features(&self) -> usize {
        self.out
    }

    /// Input features K: two per stored byte.
    pub fn in_features(&self) -> usize {
        self.inp
    }

    /// The packed E2M1 pairs `[out, in/2]` and E8M0 scales `[out, in/32]` as stored, for uploads.
    pub fn raw(&self) -> (&[u8], &[u8]) {
        (self.weight.bytes(), self.scale.bytes())
    }

    /// The weight's scale for output row `n` and K block `kb`.
    pub fn scale_at(&self, n: usize, kb: usize) -> f32 {
        e8m0_to_f32(self.scale.bytes()[n * (self.inp / QBLOCK) + kb])
    }

    /// The E2M1 code of element `(n, j)`: the low nibble holds even `j`.
    pub fn code_at(&self, n: usize, j: usize) -> u8 {
        let b = self.weight.bytes()[n * self.inp / 2 + j / 2];
        if j.is_multiple_of(2) { b & 0xF } else { b >> 4 }
    }

    /// Row `n` dequantized, `E2M1 value × scale` in f32 (exact).
    pub fn dequant_row(&self, n: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.inp, "fp4 dequant_row: output must hold in_features values");
        let mut scales = vec![0.0f32; self.inp / QBLOCK];
        self.decode_row(n, out, &mut scales);
        for (block, s) in out.chunks_exact_mut(QBLOCK).zip(scales) {
            block.iter_mut().for_each(|v| *v *= s);
        }
    }

    /// `y = x·Wᵀ` for `rows` rows of bf16 input, FP8-quantized in 32-groups; `[rows × out]` bf16.
    pub fn forward(&self, x: &[bf16], rows: usize) -> Vec<bf16> {
        qgemm_bf16(self, &QuantActs::new(x, rows, self.inp))
    }

    /// As [`Fp4Weight::forward`], the f32 sums before bf16 rounding.
    pub fn forward_f32(&self, x: &[bf16], rows: usize) -> Vec<f32> {
        qgemm_f32(self, &QuantActs::new(x, rows, self.inp))
    }

    /// Output rows `rows` (a width split's share of `w1`/`w3`); the scales are per row, so any range keeps its bits.
    pub fn narrow_rows(&self, rows: std::ops::Range<usize>) -> Result<Fp4Weight> {
        if rows.end > self.out || rows.start > rows.end {
            return Err(Error::Invalid(format!("fp4 rows {rows:?} of {}", self.out)));
        }
        let (kb, half) = (self.inp / QBLOCK, self.inp / 2);
        let w = &self.weight.bytes()[rows.start * half..rows.end * half];
        let weight = Tensor::from_bytes(self.weight.dtype(), &[rows.len(), self.weight.shape()[1]], w)?;
        let scale =
            Tensor::from_bytes(DType::F8E8M0, &[rows.len(), kb], &self.scale.bytes()[rows.start * kb..rows.end * kb])?;
        Ok(Fp4Weight { out: rows.len(), inp: self.inp, weight, scale })
    }

    /// Input columns `cols` in whole 32-blocks (a width split's share of `w2`).
    pub fn narrow_cols(&self, cols: std::ops::Range<usize>) -> Result<Fp4Weight> {
        if cols.end > self.inp
            || cols.start > cols.end
            || !cols.start.is_multiple_of(QBLOCK)
            || !cols.end.is_multiple_of(QBLOCK)
        {
            return Err(Error::Invalid(format!("fp4 columns {cols:?} of {} cut a 32-column scale block", self.inp)));
        }
        let (kb, half, n) = (self.inp / QBLOCK, self.inp / 2, cols.len());
        let (w, sc) = (self.weight.bytes(), self.scale.bytes());
        let weight: Vec<u8> =
            (0..self.out).flat_map(|r| &w[r * half + cols.start / 2..r * half + cols.end / 2]).copied().collect();
        let scale: Vec<u8> = (0..self.out)
            .flat_map(|r| &sc[r * kb + cols.start / QBLOCK..r * kb + cols.end / QBLOCK])
            .copied()
            .collect();
        Ok(Fp4Weight {
            out: self.out,
            inp: n,
            weight: Tensor::from_bytes(
                self.weight.dtype(),
                &[self.out, self.weight.shape()[1] * n / self.inp],
                &weight,
            )?,
            scale: Tensor::from_bytes(DType::F8E8M0, &[self.out, n / QBLOCK], &scale)?,
        })
    }
}

impl BlockScaledWeight for Fp4Weight {
    fn out_features(&self) -> usize {
        self.out
    }

    fn in_features(&self) -> usize {
        self.inp
    }

    #[inline(always)]
    fn decode_row(&self, n: usize, values: &mut [f32], scales: &mut [f32]) {
        let half = self.inp / 2;
        for (pair, &b) in values.chunks_exact_mut(2).zip(&self.weight.bytes()[n * half..(n + 1) * half]) {
            pair[0] = e2m1_decode(b & 0xF);
            pair[1] = e2m1_decode(b >> 4);
        }
        let kb = self.inp / QBLOCK;
        for (s, &b) in scales.iter_mut().zip(&self.scale.bytes()[n * kb..(n + 1) * kb]) {
            *s = e8m0_to_f32(b);
        }
    }
}

/// E2M1 code → f32 by bit arithmetic so a row decodes in SIMD; equal to `E2M1_TABLE` on all 16 codes.
#[inline(always)]
fn e2m1_decode(c: u8) -> f32 {
    let mag = u32::from(c & 7);
    let sub = u32::from(mag < 2);
    // The subnormal 0.5·m is built as the normal 1 + 0.5·m less 1, which is exact.
    let v = f32::from_bits((mag << 22) + ((126 + sub) << 23)) - if sub == 1 { 1.0 } else { 0.0 };
    f32::from_bits(v.to_bits() | (u32::from(c & 8) << 28))
}
