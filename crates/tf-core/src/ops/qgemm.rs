//! Block-scaled quantized linears (dsv41 §3.1): FP8 activations against FP8 or FP4 weights, f32 sums, bf16 out.

use crate::error::{Error, Result};
use crate::formats::{e4m3_table, e8m0_to_f32, quant_fp8_pow2, to_bf16};
use crate::{Checkpoint, DType, Tensor};
use half::bf16;
use rayon::prelude::*;

/// Elements per scale block along K, for activations and weights alike.
pub const QBLOCK: usize = 32;

/// Lanes of a block partial sum: one AVX register of f32.
const LANES: usize = 8;
/// Output columns per task: enough tasks to spread a 4096-wide decode row over many cores.
const COLS_PER_TASK: usize = 16;
/// Rows per tile, so a tile's activations stay in L2 while its weight rows are reused.
const ROWS_PER_TILE: usize = 32;
/// Below this many multiply-adds the work stays on the calling thread.
const PARALLEL_MIN_WORK: usize = 1 << 16;

/// A weight the block-scaled GEMM reads one output row at a time.
pub trait BlockScaledWeight: Sync {
    /// Output features (rows of the weight).
    fn out_features(&self) -> usize;

    /// Input features K, a multiple of [`QBLOCK`].
    fn in_features(&self) -> usize;

    /// Row `n`'s element codes decoded exactly to f32 into `values` (K long), its K-block scales into `scales`.
    fn decode_row(&self, n: usize, values: &mut [f32], scales: &mut [f32]);
}

/// Activation rows quantized to FP8 E4M3 in 32-groups with power-of-two scales, codes decoded to f32.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantActs {
    rows: usize,
    k: usize,
    values: Vec<f32>,
    scales: Vec<f32>,
}

impl QuantActs {
    /// Quantizes `rows` rows of `k` bf16 values (`act_quant(x, 32, "ue8m0")`); reuse it for linears sharing an input.
    pub fn new(x: &[bf16], rows: usize, k: usize) -> QuantActs {
        assert!(k > 0 && k.is_multiple_of(QBLOCK), "quantized linear: K = {k} is not a positive multiple of {QBLOCK}");
        assert_eq!(x.len(), rows * k, "quantized linear: input holds {} values, expected {rows}×{k}", x.len());
        let q = quant_fp8_pow2(x, QBLOCK);
        let lut = e4m3_table();
        let values = q.codes.iter().map(|&c| lut[c as usize]).collect();
        QuantActs { rows, k, values, scales: q.scales }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn k(&self) -> usize {
        self.k
    }

    /// Row `m`'s decoded FP8 codes (`xq`, without scales).
    pub fn row_values(&self, m: usize) -> &[f32] {
        &self.values[m * self.k..(m + 1) * self.k]
    }

    /// Row `m`'s power-of-two scales, one per K block.
    pub fn row_scales(&self, m: usize) -> &[f32] {
        let kb = self.k / QBLOCK;
        &self.scales[m * kb..(m + 1) * kb]
    }
}

/// The block-scaled GEMM before bf16 rounding, `[rows × out]` f32; each element is summed alone, in a fixed order.
pub fn qgemm_f32<W: BlockScaledWeight + ?Sized>(w: &W, x: &QuantActs) -> Vec<f32> {
    qgemm_with(w, x, None, simd_available())
}

/// [`qgemm_f32`] with each output's K-order sum starting from `init` (`rows × out`) instead of 0: the next K blocks of a sum split by K.
pub fn qgemm_f32_from<W: BlockScaledWeight + ?Sized>(w: &W, x: &QuantActs, init: &[f32]) -> Vec<f32> {
    assert_eq!(init.len(), x.rows * w.out_features(), "qgemm_f32_from: init must hold rows × out values");
    qgemm_with(w, x, Some(init), simd_available())
}

/// The block-scaled GEMM rounded to bf16 (RNE): the output of every FP8/FP4 linear.
pub fn qgemm_bf16<W: BlockScaledWeight + ?Sized>(w: &W, x: &QuantActs) -> Vec<bf16> {
    qgemm_f32(w, x).into_iter().map(to_bf16).collect()
}

/// The same product with plain (non-SIMD) code, for tests that pin SIMD and scalar paths together.
#[doc(hidden)]
pub fn qgemm_f32_scalar<W: BlockScaledWeight + ?Sized>(w: &W, x: &QuantActs) -> Vec<f32> {
    qgemm_with(w, x, None, false)
}

fn qgemm_with<W: BlockScaledWeight + ?Sized>(w: &W, x: &QuantActs, init: Option<&[f32]>, simd: bool) -> Vec<f32> {
    let (rows, out, k) = (x.rows, w.out_features(), w.in_features());
    assert_eq!(x.k, k, "quantized linear: activations have K = {}, weight has K = {k}", x.k);
    if rows == 0 || out == 0 {
        return Vec::new();
    }
    // Tasks own whole columns, so they write disjoint chunks of a column-major result.
    let mut by_col = vec![0.0f32; out * rows];
    let task = |(t, chunk): (usize, &mut [f32])| column_task(w, x, init, t * COLS_PER_TASK, chunk, simd);
    if rows * out * k < PARALLEL_MIN_WORK {
        by_col.chunks_mut(COLS_PER_TASK * rows).enumerate().for_each(task);
    } else {
        by_col.par_chunks_mut(COLS_PER_TASK * rows).enumerate().for_each(task);
    }
    if rows == 1 {
        return by_col;
    }
    let mut y = vec![0.0f32; rows * out];
    for (n, col) in by_col.chunks_exact(rows).enumerate() {
        for (m, &v) in col.iter().enumerate() {
            y[m * out + n] = v;
        }
    }
    y
}

/// Columns `n0..` of every row into `chunk` (column-major, `rows` per column).
fn column_task<W: BlockScaledWeight + ?Sized>(
    w: &W,
    x: &QuantActs,
    init: Option<&[f32]>,
    n0: usize,
    chunk: &mut [f32],
    simd: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: avx2 was detected at run time; that path does the same adds in the same order, so the bits agree.
        unsafe { column_task_avx2(w, x, init, n0, chunk) };
        return;
    }
    let _ = simd;
    column_task_body::<W, false>(w, x, init, n0, chunk);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn column_task_avx2<W: BlockScaledWeight + ?Sized>(
    w: &W,
    x: &QuantActs,
    init: Option<&[f32]>,
    n0: usize,
    chunk: &mut [f32],
) {
    column_task_body::<W, true>(w, x, init, n0, chunk);
}

#[inline(always)]
fn column_task_body<W: BlockScaledWeight + ?Sized, const SIMD: bool>(
    w: &W,
    x: &QuantActs,
    init: Option<&[f32]>,
    n0: usize,
    chunk: &mut [f32],
) {
    let (rows, out) = (x.rows, w.out_features());
    let mut wv = vec![0.0f32; x.k];
    let mut ws = vec![0.0f32; x.k / QBLOCK];
    for m0 in (0..rows).step_by(ROWS_PER_TILE) {
        let tile = m0..(m0 + ROWS_PER_TILE).min(rows);
        for (c, col) in chunk.chunks_exact_mut(rows).enumerate() {
            decode::<W, SIMD>(w, n0 + c, &mut wv, &mut ws);
            for (o, m) in col[tile.clone()].iter_mut().zip(tile.clone()) {
                let acc = init.map_or(0.0, |i| i[m * out + n0 + c]);
                *o = scaled_dot::<SIMD>(acc, x.row_values(m), x.row_scales(m), &wv, &ws);
            }
        }
    }
}

#[inline(always)]
fn decode<W: BlockScaledWeight + ?Sized, const SIMD: bool>(w: &W, n: usize, wv: &mut [f32], ws: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if SIMD {
        // SAFETY: SIMD is true only under column_task_avx2, which runs once avx2 was detected.
        unsafe { decode_avx2(w, n, wv, ws) };
        return;
    }
    w.decode_row(n, wv, ws);
}

/// A function of its own so the decode loop gets the registers to keep its constants out of the loop.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline(never)]
fn decode_avx2<W: BlockScaledWeight + ?Sized>(w: &W, n: usize, wv: &mut [f32], ws: &mut [f32]) {
    w.decode_row(n, wv, ws);
}

fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// One output element: block partials scaled and added in K order (the reference's `acc += p * a_s[k] * b_s[n,k]`).
#[inline(always)]
fn scaled_dot<const SIMD: bool>(mut acc: f32, xv: &[f32], xs: &[f32], wv: &[f32], ws: &[f32]) -> f32 {
    let blocks = xv.chunks_exact(QBLOCK).zip(wv.chunks_exact(QBLOCK));
    for ((xb, wb), (&sx, &sw)) in blocks.zip(xs.iter().zip(ws)) {
        acc += partial::<SIMD>(xb.try_into().unwrap(), wb.try_into().unwrap()) * sx * sw;
    }
    acc
}

#[inline(always)]
fn partial<const SIMD: bool>(x: &[f32; QBLOCK], w: &[f32; QBLOCK]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if SIMD {
        // SAFETY: SIMD is true only under column_task_avx2, which runs once avx2 was detected.
        return unsafe { block_partial_avx2(x, w) };
    }
    block_partial(x, w)
}

/// Σ xq·wq over one 32-block; each product of two FP8 (or FP8 and FP4) codes is exact in f32, so only adds round.
#[inline(always)]
fn block_partial(x: &[f32; QBLOCK], w: &[f32; QBLOCK]) -> f32 {
    let mut v = [0.0f32; LANES];
    for (xc, wc) in x.chunks_exact(LANES).zip(w.chunks_exact(LANES)) {
        for l in 0..LANES {
            v[l] += xc[l] * wc[l];
        }
    }
    ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]))
}

/// [`block_partial`] in AVX2: the same lanes, and the same tree as high-half-plus-low-half folds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn block_partial_avx2(x: &[f32; QBLOCK], w: &[f32; QBLOCK]) -> f32 {
    use std::arch::x86_64::*;
    let mut v = _mm256_setzero_ps();
    for c in 0..QBLOCK / LANES {
        // SAFETY: both loads read lanes c*8..c*8+8 of a 32-element array.
        let (xc, wc) =
            unsafe { (_mm256_loadu_ps(x.as_ptr().add(c * LANES)), _mm256_loadu_ps(w.as_ptr().add(c * LANES))) };
        v = _mm256_add_ps(v, _mm256_mul_ps(xc, wc));
    }
    let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)))
}

/// Fails naming `name` unless `t` has one of `dtypes` (the first is the one reported as expected).
pub fn expect_dtype(name: &str, t: &Tensor, dtypes: &[DType]) -> Result<()> {
    if dtypes.contains(&t.dtype()) {
        return Ok(());
    }
    Err(Error::DTypeMismatch { name: name.to_string(), expected: dtypes[0], found: t.dtype() })
}

/// Fails naming `name` unless `t` has exactly `shape`.
pub fn expect_shape(name: &str, t: &Tensor, shape: &[usize]) -> Result<()> {
    if t.shape() == shape {
        return Ok(());
    }
    Err(Error::ShapeMismatch { name: name.to_string(), expected: shape.to_vec(), found: t.shape().to_vec() })
}

/// `[out, in]` of a 2-D weight whose K is a positive multiple of [`QBLOCK`] after `k_per_col` elements per column.
pub fn weight_dims(name: &str, t: &Tensor, k_per_col: usize) -> Result<(usize, usize)> {
    let &[out, cols] = t.shape() else {
        return Err(Error::Invalid(format!("tensor `{name}`: expected a 2-D weight, found shape {:?}", t.shape())));
    };
    let inp = cols * k_per_col;
    if out == 0 || inp == 0 || !inp.is_multiple_of(QBLOCK) {
        return Err(Error::Invalid(format!(
            "tensor `{name}`: shape {:?} gives [out {out}, in {inp}]; both must be nonzero and in a multiple of {QBLOCK}",
            t.shape()
        )));
    }
    Ok((out, inp))
}

/// A dense FP8 linear: E4M3 `[out, in]` codes and one E8M0 scale per 32×32 tile, both kept as (mapped) tensors.
#[derive(Clone, Debug)]
pub struct Fp8Weight {
    out: usize,
    inp: usize,
    weight: Tensor,
    scale: Tensor,
}

impl Fp8Weight {
    /// Checks `{name}.weight` (F8_E4M3 `[out, in]`, in a multiple of 32) and `{name}.scale` (F8_E8M0 `[⌈out/32⌉, in/32]`).
    pub fn from_tensors(name: &str, weight: &Tensor, scale: &Tensor) -> Result<Fp8Weight> {
        let (wname, sname) = (format!("{name}.weight"), format!("{name}.scale"));
        expect_dtype(&wname, weight, &[DType::F8E4M3])?;
        let (out, inp) = weight_dims(&wname, weight, 1)?;
        expect_dtype(&sname, scale, &[DType::F8E8M0])?;
        expect_shape(&sname, scale, &[out.div_ceil(QBLOCK), inp / QBLOCK])?;
        Ok(Fp8Weight { out, inp, weight: weight.clone(), scale: scale.clone() })
    }

    /// Loads `{name}.weight` and `{name}.scale` from a checkpoint without copying them.
    pub fn load(ckpt: &Checkpoint, name: &str) -> Result<Fp8Weight> {
        Fp8Weight::from_tensors(name, &ckpt.get(&format!("{name}.weight"))?, &ckpt.get(&format!("{name}.scale"))?)
    }

    pub fn out_features(&self) -> usize {
        self.out
    }

    pub fn in_features(&self) -> usize {
        self.inp
    }

    /// Output rows `start..start+count` (whole 32-row scale tiles unless they end the weight), sharing the buffers.
    pub fn narrow_rows(&self, start: usize, count: usize) -> Result<Fp8Weight> {
        let end = start.checked_add(count).filter(|&e| e <= self.out);
        if !start.is_multiple_of(QBLOCK) || end.is_none_or(|e| !e.is_multiple_of(QBLOCK) && e != self.out) {
            return Err(Error::Invalid(format!("fp8 rows {start}+{count} of {} cut a 32-row scale tile", self.out)));
        }
        let tiles = (start + count).div_ceil(QBLOCK) - start / QBLOCK;
        let scale = self.scale.narrow0(start / QBLOCK, tiles)?;
        Ok(Fp8Weight { out: count, inp: self.inp, weight: self.weight.narrow0(start, count)?, scale })
    }

    /// The E4M3 codes `[out, in]` and E8M0 tile scales `[⌈out/32⌉, in/32]` as stored, for uploads.
    pub fn raw(&self) -> (&[u8], &[u8]) {
        (self.weight.bytes(), self.scale.bytes())
    }

    /// The weight's scale for output row `n` and K block `kb`.
    pub fn scale_at(&self, n: usize, kb: usize) -> f32 {
        e8m0_to_f32(self.scale.bytes()[(n / QBLOCK) * (self.inp / QBLOCK) + kb])
    }

    /// `y = x·Wᵀ` for `rows` rows of bf16 input, FP8-quantized in 32-groups; `[rows × out]` bf16.
    pub fn forward(&self, x: &[bf16], rows: usize) -> Vec<bf16> {
        qgemm_bf16(self, &QuantActs::new(x, rows, self.inp))
    }

    /// As [`Fp8Weight::forward`], the f32 sums before bf16 rounding.
    pub fn forward_f32(&self, x: &[bf16], rows: usize) -> Vec<f32> {
        qgemm_f32(self, &QuantActs::new(x, rows, self.inp))
    }

    /// Row `n` dequantized, `code × scale` in f32.
    pub fn dequant_row(&self, n: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.inp, "fp8 dequant_row: output must hold in_features values");
        let mut scales = vec![0.0f32; self.inp / QBLOCK];
        self.decode_row(n, out, &mut scales);
        for (block, s) in out.chunks_exact_mut(QBLOCK).zip(scales) {
            block.iter_mut().for_each(|v| *v *= s);
        }
    }

    /// The whole weight dequantized, `[out × in]` f32.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut w = vec![0.0f32; self.out * self.inp];
        for (n, row) in w.chunks_exact_mut(self.inp).enumerate() {
            self.dequant_row(n, row);
        }
        w
    }

    /// `(W·scale)` rounded to bf16, as the converter does for `wo_a` before its plain bf16 GEMM.
    pub fn dequant_bf16(&self) -> Vec<bf16> {
        self.to_f32().into_iter().map(to_bf16).collect()
    }
}

impl BlockScaledWeight for Fp8Weight {
    fn out_features(&self) -> usize {
        self.out
    }

    fn in_features(&self) -> usize {
        self.inp
    }

    #[inline(always)]
    fn decode_row(&self, n: usize, values: &mut [f32], scales: &mut [f32]) {
        let codes = &self.weight.bytes()[n * self.inp..(n + 1) * self.inp];
        for (v, &c) in values.iter_mut().zip(codes) {
            *v = e4m3_decode(c);
        }
        let kb = self.inp / QBLOCK;
        let row = &self.scale.bytes()[(n / QBLOCK) * kb..(n / QBLOCK + 1) * kb];
        for (s, &b) in scales.iter_mut().zip(row) {
            *s = e8m0_to_f32(b);
        }
    }
}

/// E4M3 byte → f32 by bit arithmetic so a row decodes in SIMD; equal to `e4m3_to_f32` on all 256 codes.
#[inline(always)]
fn e4m3_decode(c: u8) -> f32 {
    // Sign-extending gives the f32 sign bit and the magnitude from one widened lane.
    let s = c as i8 as i32;
    let (mag, sign) = (s & 0x7F, s as u32 & 0x8000_0000);
    let sub = mag < 8;
    // A subnormal m·2^-9 is built as the normal (1 + m/8)·2^-6 less 2^-6, which is exact.
    let bits = ((mag << 20) + (120 << 23) + if sub { 1 << 23 } else { 0 }) as u32;
    let v = f32::from_bits(bits) - if sub { SUBNORMAL_BIAS } else { 0.0 };
    let v = if mag == 0x7F { f32::NAN } else { v };
    f32::from_bits(v.to_bits() | sign)
}

/// 2^-6, the implicit leading one that `e4m3_decode` removes from subnormals.
const SUBNORMAL_BIAS: f32 = 0.015625;
