//! EXL3 CPU decode against quant.md §1's vectors and stats, the bitstream by two independent readings, and the loader.

use proptest::prelude::*;
use tf_core::formats::{f16_bits_to_f32, f32_to_f16_bits};
use tf_core::rng::SplitMix64;
use tf_core::{Checkpoint, DType, Tensor};
use tf_exl3::exl3::trellis::{pack_tile, state_at, tile_perm, tile_states, unpack_tile};
use tf_exl3::exl3::{Codebook, Exl3Weight, fwht_blocks};

const CODEBOOKS: [Codebook; 3] = [Codebook::Inst3, Codebook::Mcg, Codebook::Mul1];

#[test]
fn codebook_golden_values_are_bit_exact() {
    // quant.md §1.6: state → (cb0, cb1, cb2), numpy's shortest fp16 reprs, so each parses back to its exact fp16.
    let table: [(u16, [f32; 3]); 5] = [
        (0x0000, [0.768, 1.844, -3.453]),
        (0x0001, [-0.9194, 0.1345, 0.641]),
        (0x1234, [-2.2, 1.515, -0.577]),
        (0x8000, [-0.498, -0.6353, -0.868]),
        (0xFFFF, [-0.1582, 0.85, -0.6514]),
    ];
    for (state, want) in table {
        for (cb, w) in CODEBOOKS.iter().zip(want) {
            assert_eq!(cb.decode(state), f32_to_f16_bits(w), "{cb:?} state {state:#06x}");
        }
    }
}

#[test]
fn codebook_statistics_over_every_state_match_the_spec() {
    // quant.md §1.6: mean, std and range over all 65,536 states.
    let want =
        [(0.0002, 1.24371, -3.957, 3.973), (-0.00004, 1.24411, -3.949, 3.949), (-0.0019, 1.00031, -3.453, 3.348)];
    for (cb, (mean, std, lo, hi)) in CODEBOOKS.iter().zip(want) {
        let v: Vec<f64> = (0..=u16::MAX).map(|s| f64::from(cb.value(s))).collect();
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        let (mn, mx) = v.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        assert!((m - mean).abs() < 1e-4 && (sd - std).abs() < 1e-5, "{cb:?}: mean {m} std {sd}");
        assert!((mn - lo).abs() < 1e-3 && (mx - hi).abs() < 1e-3, "{cb:?}: range [{mn}, {mx}]");
    }
}

/// A 128×128 weight whose tile (0, 0) holds `rec` and every other tile zeros, unit scales.
fn one_tile(rec: Vec<u16>, k: usize, codebook: Codebook) -> Exl3Weight {
    let mut trellis = vec![0u16; 64 * 16 * k];
    trellis[..rec.len()].copy_from_slice(&rec);
    let one = f32_to_f16_bits(1.0);
    Exl3Weight { in_p: 128, out_p: 128, k, codebook, trellis, suh: vec![one; 128], svh: vec![one; 128], bias: None }
}

#[test]
fn worked_examples_decode_as_the_spec_says() {
    // K=2, MCG, symbols (7t+3) mod 4.
    let sym: Vec<u16> = (0..256).map(|t| ((7 * t + 3) % 4) as u16).collect();
    let rec = pack_tile(&sym, 2);
    assert!(rec.iter().all(|&w| w == 0xe4e4), "{:x?}", &rec[..4]);
    assert_eq!(tile_states(&rec, 2)[..4], [0x9393, 0x4e4e, 0x3939, 0xe4e4]);
    let q = one_tile(rec, 2, Codebook::Mcg).decode_q();
    let at = |r: usize, c: usize| f64::from(f16_bits_to_f32(q[r * 128 + c]));
    assert_eq!([at(0, 0), at(1, 0), at(8, 0), at(9, 0)], [0.30126953125, -1.828125, -1.396484375, -1.4140625]);
    // K=4, MUL1, symbols (7t+3) mod 16.
    let sym: Vec<u16> = (0..256).map(|t| ((7 * t + 3) % 16) as u16).collect();
    let rec = pack_tile(&sym, 4);
    assert_eq!(rec[..4], [0xf6d4, 0x3a18, 0x7e5c, 0xb290]);
    let st = tile_states(&rec, 4);
    assert_eq!((st[0], st[3]), (0xe5c3, 0x3a18));
    let q = one_tile(rec, 4, Codebook::Mul1).decode_q();
    let at = |r: usize, c: usize| f64::from(f16_bits_to_f32(q[r * 128 + c]));
    assert_eq!([at(0, 0), at(1, 0), at(8, 0), at(9, 0)], [0.26220703125, -1.3955078125, -0.92236328125, -0.84765625]);
}

#[test]
fn random_tiles_decode_as_the_independent_python_reference() {
    // tools/exl3_vectors/make_vectors.py ran quant.md's exl3_ref.py on a random record for every K and codebook.
    let json: serde_json::Value = serde_json::from_str(include_str!("fixtures/exl3_ref_tiles.json")).unwrap();
    let tiles = json["tiles"].as_array().unwrap();
    assert_eq!(tiles.len(), 24, "K = 1..8 × three codebooks");
    for t in tiles {
        let k = t["k"].as_u64().unwrap() as usize;
        let cb = CODEBOOKS[t["codebook"].as_u64().unwrap() as usize];
        let nums = |f: &str| t[f].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u16).collect::<Vec<u16>>();
        let q = one_tile(nums("record"), k, cb).decode_q();
        let got: Vec<u16> = (0..256).map(|i| q[(i / 16) * 128 + i % 16]).collect();
        assert_eq!(got, nums("q_fp16_bits"), "K {k} {cb:?}");
    }
}

#[test]
fn the_tile_permutation_is_the_mma_fragment_order() {
    let perm = tile_perm();
    assert_eq!(perm[..8], [0, 16, 128, 144, 8, 24, 136, 152]);
    let mut seen = [false; 256];
    perm.iter().for_each(|&p| seen[usize::from(p)] = true);
    assert!(seen.iter().all(|&s| s), "every cell once");
}

proptest! {
    #[test]
    fn any_bitstream_reads_the_same_both_ways(k in 1usize..=8, seed in any::<u64>()) {
        // Any bitstream is a valid encoding: the recurrence and the direct 16-bit window agree on every position.
        let mut rng = SplitMix64::new(seed);
        let rec: Vec<u16> = (0..16 * k).map(|_| rng.next_u64() as u16).collect();
        let (st, sym) = (tile_states(&rec, k), unpack_tile(&rec, k));
        for (p, (&s, &v)) in st.iter().zip(&sym).enumerate() {
            prop_assert_eq!(s, state_at(&rec, k, p), "position {}", p);
            prop_assert_eq!(s & ((1 << k) - 1) as u16, v);
        }
        prop_assert_eq!(pack_tile(&unpack_tile(&rec, k), k), rec);
    }
}

fn random_weight(
    rng: &mut SplitMix64,
    (in_p, out_p, k): (usize, usize, usize),
    codebook: Codebook,
    bias: bool,
) -> Exl3Weight {
    let trellis = (0..in_p * out_p / 256 * 16 * k).map(|_| rng.next_u64() as u16).collect();
    let mut scale = |n: usize| (0..n).map(|_| f32_to_f16_bits(rng.normal() * 0.05)).collect::<Vec<u16>>();
    let (suh, svh) = (scale(in_p), scale(out_p));
    let bias = bias.then(|| (0..out_p).map(|_| rng.normal()).collect());
    Exl3Weight { in_p, out_p, k, codebook, trellis, suh, svh, bias }
}

#[test]
fn forward_through_the_hadamards_equals_x_times_the_effective_weight() {
    let mut rng = SplitMix64::new(7);
    for (shape, cb) in
        [((256, 128, 3), Codebook::Mul1), ((128, 384, 1), Codebook::Inst3), ((128, 128, 8), Codebook::Mcg)]
    {
        let w = random_weight(&mut rng, shape, cb, true);
        let rows = 3;
        let x: Vec<f32> = (0..rows * w.in_p).map(|_| rng.normal()).collect();
        let dense = w.weight();
        let got = w.forward(&x, rows);
        for r in 0..rows {
            for j in 0..w.out_p {
                let want: f32 = (0..w.in_p).map(|i| x[r * w.in_p + i] * dense[i * w.out_p + j]).sum::<f32>()
                    + w.bias.as_ref().unwrap()[j];
                let g = got[r * w.out_p + j];
                assert!(
                    (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{shape:?} {cb:?} row {r} col {j}: {g} vs {want}"
                );
            }
        }
    }
    let mut v: Vec<f32> = (0..256).map(|_| rng.normal()).collect();
    let orig = v.clone();
    fwht_blocks(&mut v);
    fwht_blocks(&mut v);
    assert!(v.iter().zip(&orig).all(|(a, b)| (a - b).abs() < 1e-5), "the normalized transform is its own inverse");
}

/// Writes `tensors` as one safetensors file and opens it.
fn checkpoint(dir: &std::path::Path, tensors: &[(String, Tensor)]) -> Checkpoint {
    let path = dir.join("model.safetensors");
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    tf_core::st::write::write_file(&path, &refs, None).unwrap();
    Checkpoint::open(&path).unwrap()
}

fn tensors(w: &Exl3Weight, key: &str) -> Vec<(String, Tensor)> {
    let b16 = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut out = vec![
        (
            format!("{key}.trellis"),
            Tensor::from_bytes(DType::I16, &[w.in_p / 16, w.out_p / 16, 16 * w.k], &b16(&w.trellis)).unwrap(),
        ),
        (format!("{key}.suh"), Tensor::from_bytes(DType::F16, &[w.in_p], &b16(&w.suh)).unwrap()),
        (format!("{key}.svh"), Tensor::from_bytes(DType::F16, &[w.out_p], &b16(&w.svh)).unwrap()),
    ];
    if let Some(b) = &w.bias {
        out.push((format!("{key}.bias"), Tensor::from_f32(&[w.out_p], b).unwrap()));
    }
    let marker = |m: u32| Tensor::from_bytes(DType::I32, &[], &m.to_le_bytes()).unwrap();
    match w.codebook {
        Codebook::Mcg => out.push((format!("{key}.mcg"), marker(0xCBAC_1FED))),
        Codebook::Mul1 => out.push((format!("{key}.mul1"), marker(0x83DC_D12D))),
        Codebook::Inst3 => {}
    }
    out
}

#[test]
fn a_stored_linear_loads_and_bad_ones_are_refused_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = SplitMix64::new(3);
    let key = "layers.0.ffn.experts.5.w1";
    for cb in CODEBOOKS {
        let w = random_weight(&mut rng, (256, 128, 4), cb, cb == Codebook::Mcg);
        let loaded = Exl3Weight::load(&checkpoint(dir.path(), &tensors(&w, key)), key).unwrap();
        assert_eq!(loaded, w, "{cb:?}");
    }
    let w = random_weight(&mut rng, (128, 128, 2), Codebook::Mul1, false);
    let good = tensors(&w, key);
    let with = |name: &str, t: Option<Tensor>| {
        let mut v: Vec<(String, Tensor)> = good.iter().filter(|(n, _)| !n.ends_with(name)).cloned().collect();
        if let Some(t) = t {
            v.push((format!("{key}.{name}"), t));
        }
        Exl3Weight::load(&checkpoint(dir.path(), &v), key).unwrap_err().to_string()
    };
    let cases: Vec<(&str, Option<Tensor>, &str)> = vec![
        ("trellis", Some(Tensor::zeros(DType::I16, &[8, 8, 144]).unwrap()), "16·K"),
        ("trellis", Some(Tensor::zeros(DType::I16, &[9, 8, 32]).unwrap()), "multiple of 128"),
        ("trellis", Some(Tensor::zeros(DType::F16, &[8, 8, 32]).unwrap()), "dtype"),
        ("suh", Some(Tensor::zeros(DType::F16, &[64]).unwrap()), "shape"),
        ("svh", None, "not found"),
        ("mul1", Some(Tensor::from_bytes(DType::I32, &[], &7u32.to_le_bytes()).unwrap()), "locked"),
        ("mcg", Some(Tensor::from_bytes(DType::I32, &[], &0xCBAC_1FEDu32.to_le_bytes()).unwrap()), "one codebook"),
    ];
    for (name, t, says) in cases {
        let e = if name == "mcg" {
            let mut v = good.clone();
            v.push((format!("{key}.mcg"), t.unwrap()));
            Exl3Weight::load(&checkpoint(dir.path(), &v), key).unwrap_err().to_string()
        } else {
            with(name, t)
        };
        assert!(e.contains(key) && e.contains(says), "{name}: {e}");
    }
}
