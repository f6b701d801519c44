//! FP4 routed-expert linear against a slow f64 reading of dsv41 §3.1, plus layout, invariance and errors.

use proptest::prelude::*;
use tf_core::formats::{E2M1_TABLE, e8m0_to_f32, pack_fp4, quant_fp8_pow2, to_bf16};
use tf_core::st::write;
use tf_core::{Checkpoint, DType, Error, Tensor, bf16};
use tf_exl3::Fp4Weight;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Random E2M1 codes (one per element, unpacked) and E8M0 scale bytes around 1.
fn fp4_parts(out: usize, inp: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let mut r = Rng(seed);
    let codes = (0..out * inp).map(|_| r.below(16) as u8).collect();
    let scales = (0..out * inp / 32).map(|_| 118 + r.below(18) as u8).collect();
    (codes, scales)
}

fn fp4_weight(name: &str, out: usize, inp: usize, codes: &[u8], scales: &[u8]) -> Fp4Weight {
    let w = Tensor::from_bytes(DType::I8, &[out, inp / 2], &pack_fp4(codes)).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[out, inp / 32], scales).unwrap();
    Fp4Weight::from_tensors(name, &w, &s).unwrap()
}

/// bf16 activations whose 32-groups span a range of magnitudes, so each group gets its own scale.
fn acts(rows: usize, inp: usize, seed: u64) -> Vec<bf16> {
    let mut r = Rng(seed);
    let mags: Vec<f32> = (0..rows * inp / 32).map(|_| 2f32.powi(r.below(12) as i32 - 6)).collect();
    (0..rows * inp).map(|i| to_bf16(((r.below(2001) as f32) / 1000.0 - 1.0) * mags[i / 32])).collect()
}

/// The formula in f64 from the unpacked codes: Σ_j (xq·s_x)(E2M1[code]·s_w), with Σ|term|.
fn reference(x: &[bf16], rows: usize, codes: &[u8], scales: &[u8], out: usize, inp: usize) -> Vec<(f64, f64)> {
    let mut y = Vec::with_capacity(rows * out);
    for m in 0..rows {
        let q = quant_fp8_pow2(&x[m * inp..(m + 1) * inp], 32);
        for n in 0..out {
            let (mut sum, mut mag) = (0.0f64, 0.0f64);
            for j in 0..inp {
                let wd =
                    E2M1_TABLE[codes[n * inp + j] as usize] as f64 * e8m0_to_f32(scales[n * inp / 32 + j / 32]) as f64;
                let t = q.value(j) as f64 * wd;
                sum += t;
                mag += t.abs();
            }
            y.push((sum, mag));
        }
    }
    y
}

/// f32 sum error bound: at most 7 rounded adds inside a block, then one per K block, each ≤ 2^-24 relative.
fn check_against_reference(rows: usize, out: usize, inp: usize, seed: u64) {
    let (codes, scales) = fp4_parts(out, inp, seed);
    let w = fp4_weight("e", out, inp, &codes, &scales);
    let x = acts(rows, inp, seed ^ 0xA5);
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
    let shapes = [(1, 1, 32), (1, 40, 96), (3, 33, 64), (2, 31, 256), (5, 100, 320), (2, 64, 1024), (37, 70, 128)];
    for (i, &(rows, out, inp)) in shapes.iter().enumerate() {
        check_against_reference(rows, out, inp, i as u64 + 100);
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
fn rows_are_batch_invariant() {
    let (rows, out, inp) = (41, 70, 512);
    let (codes, scales) = fp4_parts(out, inp, 7);
    let w = fp4_weight("e", out, inp, &codes, &scales);
    let x = acts(rows, inp, 8);
    let full = w.forward(&x, rows);
    for m in [0, 1, 31, 32, 40] {
        let one = w.forward(&x[m * inp..(m + 1) * inp], 1);
        assert_eq!(one, full[m * out..(m + 1) * out], "row {m} alone differs from row {m} in a batch");
        let end = (m + 2).min(rows);
        let part = w.forward(&x[m * inp..end * inp], end - m);
        assert_eq!(part[..out], full[m * out..(m + 1) * out], "row {m} leading a smaller batch differs");
    }
}

#[test]
fn low_nibble_is_the_even_element() {
    let scale = Tensor::from_bytes(DType::F8E8M0, &[1, 1], &[127]).unwrap();
    let mut packed = vec![0u8; 16];
    packed[0] = 0x72;
    let w = Fp4Weight::from_tensors("nib", &Tensor::from_bytes(DType::I8, &[1, 16], &packed).unwrap(), &scale).unwrap();
    packed[0] = 0x27;
    let swapped =
        Fp4Weight::from_tensors("nib", &Tensor::from_bytes(DType::I8, &[1, 16], &packed).unwrap(), &scale).unwrap();
    assert_eq!((w.code_at(0, 0), w.code_at(0, 1)), (0x2, 0x7));
    let mut row = vec![0.0f32; 32];
    w.dequant_row(0, &mut row);
    assert_eq!(
        &row[..3],
        &[1.0, 6.0, 0.0],
        "byte 0x72: low nibble 2 (1.0) is element 0, high nibble 7 (6.0) element 1"
    );
    let mut x = vec![bf16::ZERO; 32];
    x[0] = to_bf16(1.0);
    assert_eq!(w.forward_f32(&x, 1), vec![1.0], "x picks element 0, the low nibble");
    assert_eq!(swapped.forward_f32(&x, 1), vec![6.0], "swapping the nibbles must change the answer");
}

#[test]
fn hand_computed_tiny_case() {
    let mut x = vec![bf16::ZERO; 32];
    (x[0], x[1], x[3], x[4]) = (to_bf16(1.0), to_bf16(2.0), to_bf16(-0.5), to_bf16(0.015625));
    assert_eq!(quant_fp8_pow2(&x, 32).scales, vec![2f32.powi(-7)], "xq = [128, 256, 0, -64, 2], s_x = 2^-7");
    let mut codes = vec![0u8; 32];
    (codes[0], codes[1], codes[3], codes[4]) = (0x7, 0x5, 0xC, 0x7);
    let w = fp4_weight("hand", 1, 32, &codes, &[125]);
    assert_eq!(w.forward_f32(&x, 1), vec![1676.0 / 512.0], "128·6 + 256·3 + (-64)(-2) + 2·6 = 1676, times 2^-7 · 2^-2");
    assert_eq!(w.forward(&x, 1), vec![to_bf16(3.28125)], "3.2734375 is 209.5 bf16 ulps: ties to even 210");
    assert_eq!(to_bf16(3.28125).to_f32(), 3.28125);
}

fn err_text<T>(r: Result<T, Error>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_tensors_are_refused_by_name() {
    let name = "layers.5.ffn.experts.9.w2";
    let w = Tensor::zeros(DType::I8, &[40, 48]).unwrap();
    let s = Tensor::zeros(DType::F8E8M0, &[40, 3]).unwrap();
    assert_eq!(Fp4Weight::from_tensors(name, &w, &s).unwrap().in_features(), 96);
    assert!(Fp4Weight::from_tensors(name, &Tensor::zeros(DType::Fp4x2, &[40, 48]).unwrap(), &s).is_ok());
    let e = Fp4Weight::from_tensors(name, &w, &Tensor::zeros(DType::F8E8M0, &[40, 6]).unwrap()).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { name: n, expected, .. } if n == "layers.5.ffn.experts.9.w2.scale" && expected == &[40, 3]),
        "a scale per 16 is refused: {e}"
    );
    let fp8 = Tensor::zeros(DType::F8E4M3, &[40, 48]).unwrap();
    let e = Fp4Weight::from_tensors(name, &fp8, &s).unwrap_err();
    assert!(matches!(&e, Error::DTypeMismatch { name: n, .. } if n == "layers.5.ffn.experts.9.w2.weight"), "{e}");
    let f32s = Tensor::zeros(DType::F32, &[40, 3]).unwrap();
    assert!(err_text(Fp4Weight::from_tensors(name, &w, &f32s)).contains("`layers.5.ffn.experts.9.w2.scale`"));
    let odd = Tensor::zeros(DType::I8, &[40, 40]).unwrap();
    assert!(err_text(Fp4Weight::from_tensors(name, &odd, &s)).contains("`layers.5.ffn.experts.9.w2.weight`"));
}

#[test]
fn loads_packed_i8_from_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (codes, scales) = fp4_parts(8, 64, 11);
    let w = Tensor::from_bytes(DType::I8, &[8, 32], &pack_fp4(&codes)).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[8, 2], &scales).unwrap();
    let path = dir.path().join("experts.safetensors");
    write::write_file(&path, &[("e.w1.weight", &w), ("e.w1.scale", &s), ("e.w3.weight", &w)], None).unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();
    let loaded = Fp4Weight::load(&ckpt, "e.w1").unwrap();
    let x = acts(3, 64, 12);
    assert_eq!(loaded.forward(&x, 3), fp4_weight("e.w1", 8, 64, &codes, &scales).forward(&x, 3));
    assert!(err_text(Fp4Weight::load(&ckpt, "e.w3")).contains("`e.w3.scale`"));
}

#[test]
fn every_e2m1_code_decodes_as_the_table() {
    let codes: Vec<u8> = (0..32).map(|j| j % 16).collect();
    let w = fp4_weight("all", 1, 32, &codes, &[127]);
    let mut row = vec![0.0f32; 32];
    w.dequant_row(0, &mut row);
    for (j, v) in row.iter().enumerate() {
        assert_eq!(v.to_bits(), E2M1_TABLE[j % 16].to_bits(), "code {}", j % 16);
    }
}

#[test]
fn dequant_row_is_code_times_scale() {
    let (out, inp) = (5, 96);
    let (codes, scales) = fp4_parts(out, inp, 13);
    let w = fp4_weight("e", out, inp, &codes, &scales);
    let mut row = vec![0.0f32; inp];
    for n in 0..out {
        w.dequant_row(n, &mut row);
        for j in 0..inp {
            assert_eq!(w.code_at(n, j), codes[n * inp + j]);
            let want = E2M1_TABLE[codes[n * inp + j] as usize] * e8m0_to_f32(scales[n * 3 + j / 32]);
            assert_eq!(row[j].to_bits(), want.to_bits(), "[{n},{j}]");
        }
        assert_eq!(w.scale_at(n, 1), e8m0_to_f32(scales[n * 3 + 1]));
    }
}

/// A width split (issue 25): row shares of a weight give its rows, and K shares chained through `qgemm_f32_from` give the whole sum's bits.
#[test]
fn row_and_column_shares_chain_to_the_whole_bits() {
    use tf_core::ops::qgemm::{QuantActs, qgemm_f32, qgemm_f32_from};
    let (rows, out, inp) = (5, 24, 160);
    let (codes, scales) = fp4_parts(out, inp, 11);
    let w = fp4_weight("w2", out, inp, &codes, &scales);
    let x = acts(rows, inp, 12);
    let whole = w.forward_f32(&x, rows);
    for cuts in [vec![0, 160], vec![0, 64, 160], vec![0, 32, 32, 96, 160], vec![0, 0, 160]] {
        let mut acc = vec![0.0f32; rows * out];
        for k in cuts.windows(2) {
            let share = w.narrow_cols(k[0]..k[1]).unwrap();
            // An empty share (more ranks than K blocks) passes the sum on as it came.
            if k[0] == k[1] {
                assert_eq!(share.in_features(), 0);
                continue;
            }
            let xs: Vec<bf16> = x.chunks_exact(inp).flat_map(|r| r[k[0]..k[1]].iter().copied()).collect();
            acc = qgemm_f32_from(&share, &QuantActs::new(&xs, rows, k[1] - k[0]), &acc);
        }
        assert!(acc.iter().zip(&whole).all(|(a, b)| a.to_bits() == b.to_bits()), "K cut at {cuts:?}");
    }
    // Adding each share's own sum instead would not give these bits: the chain is what keeps TP1's order.
    let halves: Vec<Vec<f32>> = [0..96, 96..160]
        .map(|k| {
            let xs: Vec<bf16> = x.chunks_exact(inp).flat_map(|r| r[k.clone()].iter().copied()).collect();
            qgemm_f32(&w.narrow_cols(k.clone()).unwrap(), &QuantActs::new(&xs, rows, k.len()))
        })
        .into();
    let naive = halves[0].iter().zip(&halves[1]).zip(&whole).filter(|((a, b), w)| (*a + *b).to_bits() != w.to_bits());
    assert!(naive.count() > 0, "two shares' own sums added differ from the K-order sum somewhere");
    let first = qgemm_f32(&w.narrow_rows(8..20).unwrap(), &QuantActs::new(&x, rows, inp));
    for m in 0..rows {
        assert_eq!(first[m * 12..(m + 1) * 12], whole[m * out + 8..m * out + 20], "row share, row {m}");
    }
    assert!(w.narrow_cols(16..64).is_err(), "a share must keep whole 32-column scale blocks");
    assert!(w.narrow_rows(20..25).is_err());
}
