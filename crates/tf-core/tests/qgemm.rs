//! FP8 block-scaled linear against a slow f64 reading of dsv41 §3.1, plus invariance, errors and a hand case.

use proptest::prelude::*;
use tf_core::formats::{e4m3_to_f32, e8m0_to_f32, quant_fp8_pow2, to_bf16};
use tf_core::ops::qgemm::{QuantActs, qgemm_f32, qgemm_f32_scalar};
use tf_core::ops::{Fp8Weight, matmul_nt};
use tf_core::st::write;
use tf_core::{Checkpoint, DType, Error, Tensor, bf16};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random finite E4M3 codes (NaN codes 0x7F/0xFF skipped) and E8M0 scale bytes around 1.
fn fp8_parts(out: usize, inp: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let mut r = Rng(seed);
    let codes = (0..out * inp).map(|_| r.below(256) as u8).map(|c| if c & 0x7F == 0x7F { c - 1 } else { c }).collect();
    let scales = (0..out.div_ceil(32) * (inp / 32)).map(|_| 118 + r.below(18) as u8).collect();
    (codes, scales)
}

fn fp8_weight(name: &str, out: usize, inp: usize, codes: &[u8], scales: &[u8]) -> Fp8Weight {
    let w = Tensor::from_bytes(DType::F8E4M3, &[out, inp], codes).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[out.div_ceil(32), inp / 32], scales).unwrap();
    Fp8Weight::from_tensors(name, &w, &s).unwrap()
}

/// bf16 activations whose 32-groups span a range of magnitudes, so each group gets its own scale.
fn acts(rows: usize, inp: usize, seed: u64) -> Vec<bf16> {
    let mut r = Rng(seed);
    let group_mag: Vec<f32> = (0..rows * inp / 32).map(|_| 2f32.powi(r.below(12) as i32 - 6)).collect();
    (0..rows * inp).map(|i| to_bf16(((r.below(2001) as f32) / 1000.0 - 1.0) * group_mag[i / 32])).collect()
}

/// The formula in f64: Σ_j (xq·s_x)(wq·s_w), with Σ|term| for the f32 error bound.
fn reference(x: &[bf16], rows: usize, codes: &[u8], scales: &[u8], out: usize, inp: usize) -> Vec<(f64, f64)> {
    let kb = inp / 32;
    let mut y = Vec::with_capacity(rows * out);
    for m in 0..rows {
        let q = quant_fp8_pow2(&x[m * inp..(m + 1) * inp], 32);
        for n in 0..out {
            let (mut sum, mut mag) = (0.0f64, 0.0f64);
            for j in 0..inp {
                let xd = e4m3_to_f32(q.codes[j]) as f64 * q.scales[j / 32] as f64;
                let wd = e4m3_to_f32(codes[n * inp + j]) as f64 * e8m0_to_f32(scales[(n / 32) * kb + j / 32]) as f64;
                sum += xd * wd;
                mag += (xd * wd).abs();
            }
            y.push((sum, mag));
        }
    }
    y
}

/// f32 sum error bound: at most 7 rounded adds inside a block, then one per K block, each ≤ 2^-24 relative.
fn check_against_reference(rows: usize, out: usize, inp: usize, seed: u64) {
    let (codes, scales) = fp8_parts(out, inp, seed);
    let w = fp8_weight("t", out, inp, &codes, &scales);
    let x = acts(rows, inp, seed ^ 0x55);
    let got = w.forward_f32(&x, rows);
    let got_bf = w.forward(&x, rows);
    let want = reference(&x, rows, &codes, &scales, out, inp);
    let tol_factor = (8 + inp / 32) as f64 * 2f64.powi(-24);
    for (i, (&g, &(r, mag))) in got.iter().zip(&want).enumerate() {
        let tol = tol_factor * mag;
        assert!((g as f64 - r).abs() <= tol, "[{rows}x{out}x{inp}] elem {i}: {g} vs {r} (tol {tol})");
        assert_eq!(got_bf[i].to_bits(), to_bf16(g).to_bits(), "bf16 output is the f32 sum rounded RNE");
        if tol * 512.0 < r.abs() {
            let d = (got_bf[i].to_bits() as i32 - to_bf16(r as f32).to_bits() as i32).abs();
            assert!(d <= 1, "[{rows}x{out}x{inp}] elem {i}: bf16 {} vs reference {r}", got_bf[i]);
        }
    }
}

#[test]
fn matches_f64_reference_across_shapes() {
    for (i, &(rows, out, inp)) in
        [(1, 1, 32), (1, 40, 96), (3, 33, 64), (2, 31, 256), (5, 100, 320), (2, 64, 1024), (37, 70, 128)]
            .iter()
            .enumerate()
    {
        check_against_reference(rows, out, inp, i as u64 + 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn matches_f64_reference_random(rows in 1usize..4, out in 1usize..80, blocks in 1usize..6, seed in any::<u64>()) {
        check_against_reference(rows, out, blocks * 32, seed);
    }
}

#[test]
fn rows_are_batch_and_thread_invariant() {
    let (rows, out, inp) = (41, 70, 512);
    let (codes, scales) = fp8_parts(out, inp, 9);
    let w = fp8_weight("t", out, inp, &codes, &scales);
    let x = acts(rows, inp, 10);
    let full = w.forward_f32(&x, rows);
    for m in [0, 1, 31, 32, 40] {
        let one = w.forward_f32(&x[m * inp..(m + 1) * inp], 1);
        assert_eq!(one, full[m * out..(m + 1) * out], "row {m} alone differs from row {m} in a batch");
        let end = (m + 2).min(rows);
        let part = w.forward_f32(&x[m * inp..end * inp], end - m);
        assert_eq!(part[..out], full[m * out..(m + 1) * out], "row {m} leading a smaller batch differs");
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    assert_eq!(pool.install(|| w.forward_f32(&x, rows)), full, "one thread gives other bits");
    let q = QuantActs::new(&x, rows, inp);
    assert_eq!(qgemm_f32_scalar(&w, &q), full, "scalar and SIMD paths differ");
    assert_eq!(qgemm_f32(&w, &q), full);
}

fn err_text<T>(r: Result<T, Error>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_tensors_are_refused_by_name() {
    let name = "layers.3.attn.wq_a";
    let w = Tensor::zeros(DType::F8E4M3, &[40, 64]).unwrap();
    let s = Tensor::zeros(DType::F8E8M0, &[2, 2]).unwrap();
    assert!(Fp8Weight::from_tensors(name, &w, &s).is_ok(), "a partial last 32-row tile takes a ceil-sized grid");
    let floor = Tensor::zeros(DType::F8E8M0, &[1, 2]).unwrap();
    let e = Fp8Weight::from_tensors(name, &w, &floor).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { name: n, expected, .. } if n == "layers.3.attn.wq_a.scale" && expected == &[2, 2]),
        "{e}"
    );
    let bf = Tensor::zeros(DType::BF16, &[40, 64]).unwrap();
    let e = Fp8Weight::from_tensors(name, &bf, &s).unwrap_err();
    assert!(matches!(&e, Error::DTypeMismatch { name: n, .. } if n == "layers.3.attn.wq_a.weight"), "{e}");
    let f32s = Tensor::zeros(DType::F32, &[2, 2]).unwrap();
    assert!(err_text(Fp8Weight::from_tensors(name, &w, &f32s)).contains("`layers.3.attn.wq_a.scale`"));
    let odd = Tensor::zeros(DType::F8E4M3, &[40, 48]).unwrap();
    assert!(err_text(Fp8Weight::from_tensors(name, &odd, &s)).contains("`layers.3.attn.wq_a.weight`"));
    let flat = Tensor::zeros(DType::F8E4M3, &[64]).unwrap();
    assert!(err_text(Fp8Weight::from_tensors(name, &flat, &s)).contains("`layers.3.attn.wq_a.weight`"));
}

#[test]
fn loads_from_a_checkpoint_and_names_a_missing_scale() {
    let dir = tempfile::tempdir().unwrap();
    let (codes, scales) = fp8_parts(40, 64, 3);
    let w = Tensor::from_bytes(DType::F8E4M3, &[40, 64], &codes).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[2, 2], &scales).unwrap();
    let path = dir.path().join("m.safetensors");
    write::write_file(&path, &[("l.wq.weight", &w), ("l.wq.scale", &s), ("l.wk.weight", &w)], None).unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();
    let loaded = Fp8Weight::load(&ckpt, "l.wq").unwrap();
    assert_eq!((loaded.out_features(), loaded.in_features()), (40, 64));
    let x = acts(2, 64, 4);
    assert_eq!(loaded.forward(&x, 2), fp8_weight("l.wq", 40, 64, &codes, &scales).forward(&x, 2));
    assert!(err_text(Fp8Weight::load(&ckpt, "l.wk")).contains("`l.wk.scale`"));
}

#[test]
fn hand_computed_tiny_case() {
    assert_eq!(e4m3_to_f32(0x04), 2f32.powi(-7));
    assert_eq!(e4m3_to_f32(0x0C), 3.0 / 128.0);
    assert_eq!((e4m3_to_f32(0x38), e4m3_to_f32(0x44)), (1.0, 3.0));
    let mut x = vec![bf16::ZERO; 32];
    (x[0], x[1], x[2]) = (to_bf16(1.0), to_bf16(2.0), to_bf16(-0.5));
    let q = quant_fp8_pow2(&x, 32);
    assert_eq!(q.scales, vec![2f32.powi(-7)], "amax 2 gives s_x = 2^ceil(log2(2/448)) = 2^-7, xq = [128, 256, -64]");
    let mut codes = vec![0u8; 64];
    (codes[0], codes[1]) = (0x04, 0x38);
    (codes[32], codes[33]) = (0x0C, 0x44);
    let w = fp8_weight("hand", 2, 32, &codes, &[126]);
    let y = w.forward_f32(&x, 1);
    assert_eq!(
        y,
        vec![257.0 / 256.0, 771.0 / 256.0],
        "partials 128/128 + 256 = 257 and 3 + 768 = 771, times 2^-7 · 0.5"
    );
    let yb: Vec<f32> = w.forward(&x, 1).iter().map(|v| v.to_f32()).collect();
    assert_eq!(yb, vec![1.0, 3.015625], "1 + 2^-8 ties to even 1.0; 3 + 0.75 ulp rounds up");
}

#[test]
fn block_sum_follows_the_documented_lane_order() {
    let mut x = vec![bf16::ZERO; 32];
    (x[0], x[1], x[8]) = (to_bf16(256.0), to_bf16(1.0), to_bf16(256.0));
    let mut codes = vec![0u8; 32];
    (codes[0], codes[1], codes[8]) = (0x78, 0x01, 0xF8);
    let w = fp8_weight("order", 1, 32, &codes, &[127]);
    assert_eq!(
        w.forward_f32(&x, 1),
        vec![2f32.powi(-9)],
        "lane 0 cancels 2^16 exactly; a j-order sum would absorb 2^-9"
    );
}

#[test]
fn two_blocks_keep_their_own_scales() {
    let mut x = vec![bf16::ZERO; 64];
    (x[0], x[32]) = (to_bf16(1.0), to_bf16(64.0));
    let mut codes = vec![0u8; 64];
    (codes[0], codes[32]) = (0x38, 0x38);
    let w = fp8_weight("two", 1, 64, &codes, &[127, 129]);
    assert_eq!(w.forward_f32(&x, 1), vec![1.0 + 64.0 * 4.0], "block 1's weight scale 2^2 applies to block 1 only");
}

#[test]
fn every_e4m3_code_decodes_as_the_table() {
    let codes: Vec<u8> = (0..=255).collect();
    let w = fp8_weight("all", 8, 32, &codes, &[127]);
    for (c, v) in w.to_f32().into_iter().enumerate() {
        let want = e4m3_to_f32(c as u8);
        assert!(v.to_bits() == want.to_bits() || (v.is_nan() && want.is_nan()), "code {c:#04x}: {v} vs {want}");
    }
}

#[test]
fn dequantized_weight_is_code_times_tile_scale() {
    let (out, inp) = (40, 96);
    let (codes, scales) = fp8_parts(out, inp, 21);
    let w = fp8_weight("wo_a", out, inp, &codes, &scales);
    let f = w.to_f32();
    let b = w.dequant_bf16();
    for n in 0..out {
        for j in 0..inp {
            let want = e4m3_to_f32(codes[n * inp + j]) * e8m0_to_f32(scales[(n / 32) * 3 + j / 32]);
            assert_eq!(f[n * inp + j].to_bits(), want.to_bits(), "[{n},{j}]");
            assert_eq!(b[n * inp + j], to_bf16(want));
        }
        assert_eq!(w.scale_at(n, 2), e8m0_to_f32(scales[(n / 32) * 3 + 2]));
    }
    let x = acts(1, inp, 5);
    let xd: Vec<f32> = {
        let q = quant_fp8_pow2(&x, 32);
        (0..inp).map(|j| q.value(j)).collect()
    };
    let mm = matmul_nt(&xd, &f, 1, out, inp);
    for (a, b) in w.forward_f32(&x, 1).iter().zip(&mm) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs dequantized matmul {b}");
    }
}
