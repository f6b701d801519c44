//! Table gather: FP8 E4M3 × E8M0 dequantization to bf16, shapes, errors and checkpoint loading.

use tf_core::formats::{e4m3_to_f32, e8m0_to_f32, to_bf16};
use tf_core::st::write::write_file;
use tf_core::{Checkpoint, DType, Tensor, bf16};
use tf_engram::{EngramError, EngramTable, TensorTable, dequant_row};

fn table(rows: usize, dim: usize) -> (Vec<u8>, Vec<u8>, TensorTable) {
    let codes: Vec<u8> = (0..rows * dim).map(|i| (i * 37 % 256) as u8).collect();
    let scales: Vec<u8> = (0..rows * dim / 32).map(|i| (110 + i * 7 % 30) as u8).collect();
    let w = Tensor::from_bytes(DType::F8E4M3, &[rows, dim], &codes).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[rows, dim / 32], &scales).unwrap();
    (codes, scales, TensorTable::new("layers.1.engram.embed", w, s).unwrap())
}

#[test]
fn dequant_is_e4m3_times_pow2_rounded_to_bf16() {
    let mut codes = [0x38u8; 32];
    codes[1] = 0x7E;
    codes[2] = 0x01;
    codes[3] = 0xB9;
    let mut out = [bf16::ZERO; 32];
    dequant_row(&codes, &[127 + 3], &mut out);
    assert_eq!(out[0].to_f32(), 8.0);
    assert_eq!(out[1].to_f32(), 448.0 * 8.0);
    assert_eq!(out[2].to_f32(), 2f32.powi(-9) * 8.0, "subnormal e4m3");
    assert_eq!(out[3].to_f32(), -1.125 * 8.0);
    dequant_row(&[0x7F; 32], &[127], &mut out);
    assert!(out[0].to_f32().is_nan(), "e4m3 NaN stays NaN");
    dequant_row(&[0x38; 32], &[255], &mut out);
    assert!(out[0].to_f32().is_nan(), "e8m0 NaN scale");
}

#[test]
fn gather_matches_elementwise_dequant_for_every_code() {
    let (rows, dim) = (16, 64);
    let (codes, scales, t) = table(rows, dim);
    assert_eq!((t.rows(), t.dim(), t.name()), (16, 64, "layers.1.engram.embed"));
    let ids = [3u64, 0, 15, 3, 8];
    let mut out = vec![bf16::ZERO; ids.len() * dim];
    t.gather(&ids, &mut out).unwrap();
    for (i, &id) in ids.iter().enumerate() {
        for c in 0..dim {
            let r = id as usize;
            let want = to_bf16(e4m3_to_f32(codes[r * dim + c]) * e8m0_to_f32(scales[r * dim / 32 + c / 32]));
            assert_eq!(out[i * dim + c].to_bits(), want.to_bits(), "id {id} channel {c}");
        }
    }
}

#[test]
fn out_of_range_ids_and_bad_shapes_name_the_table() {
    let (_, _, t) = table(4, 32);
    let mut out = vec![bf16::ZERO; 64];
    let err = t.gather(&[1, 4], &mut out).unwrap_err();
    assert!(matches!(err, EngramError::IdOutOfRange { id: 4, rows: 4, .. }));
    assert!(err.to_string().contains("layers.1.engram.embed"), "{err}");
    assert!(t.gather(&[1], &mut out).unwrap_err().to_string().contains("layers.1.engram.embed"));
    let w = Tensor::zeros(DType::F8E4M3, &[4, 64]).unwrap();
    let err = TensorTable::new("t", w.clone(), Tensor::zeros(DType::F8E8M0, &[4, 1]).unwrap()).unwrap_err();
    assert!(err.to_string().contains("needs scale [4, 2]"), "{err}");
    let err = TensorTable::new("t", w, Tensor::zeros(DType::U8, &[4, 2]).unwrap()).unwrap_err();
    assert!(err.to_string().contains("F8_E8M0"), "{err}");
}

#[test]
fn opens_a_mapped_checkpoint_and_reports_missing_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let (codes, scales, owned) = table(8, 32);
    let w = Tensor::from_bytes(DType::F8E4M3, &[8, 32], &codes).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[8, 1], &scales).unwrap();
    let path = dir.path().join("model.safetensors");
    write_file(&path, &[("layers.1.engram.embed.weight", &w), ("layers.1.engram.embed.scale", &s)], None).unwrap();
    let ckpt = Checkpoint::open(dir.path()).unwrap();
    let mapped = TensorTable::open(&ckpt, "layers.1.engram.embed").unwrap();
    let (mut a, mut b) = (vec![bf16::ZERO; 96], vec![bf16::ZERO; 96]);
    mapped.gather(&[7, 0, 5], &mut a).unwrap();
    owned.gather(&[7, 0, 5], &mut b).unwrap();
    assert_eq!(a, b);
    let err = TensorTable::open(&ckpt, "layers.14.engram.embed").unwrap_err().to_string();
    assert!(err.contains("layers.14.engram.embed.weight"), "{err}");
    let dynamic: &dyn EngramTable = &mapped;
    assert_eq!(dynamic.rows(), 8);
}
