//! Host tensor views and conversions.

use tf_core::{DType, Tensor, bf16};

#[test]
fn narrow_and_reshape_share_bytes() {
    let t = Tensor::from_f32(&[3, 2], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    let r = t.narrow0(1, 2).unwrap();
    assert_eq!(r.shape(), &[2, 2]);
    assert_eq!(r.as_slice::<f32>().unwrap(), &[2.0, 3.0, 4.0, 5.0]);
    assert_eq!(r.reshape(&[4]).unwrap().to_f32_vec().unwrap(), vec![2.0, 3.0, 4.0, 5.0]);
    assert!(t.narrow0(2, 2).is_err());
    assert!(t.reshape(&[5]).is_err());
    assert!(t.as_slice::<u16>().is_err(), "width mismatch is refused");
}

#[test]
fn decodes_every_float_dtype() {
    let b = Tensor::from_bf16(&[2], &[bf16::from_f32(1.5), bf16::from_f32(-2.0)]).unwrap();
    assert_eq!(b.to_f32_vec().unwrap(), vec![1.5, -2.0]);
    let h = Tensor::from_bytes(DType::F16, &[1], &0x3C00u16.to_le_bytes()).unwrap();
    assert_eq!(h.to_f32_vec().unwrap(), vec![1.0]);
    let e = Tensor::from_bytes(DType::F8E8M0, &[2], &[127, 130]).unwrap();
    assert_eq!(e.to_f32_vec().unwrap(), vec![1.0, 8.0]);
    let f8 = Tensor::from_bytes(DType::F8E4M3, &[2], &[0x7E, 0x01]).unwrap();
    assert_eq!(f8.to_f32_vec().unwrap(), vec![448.0, 2f32.powi(-9)]);
    assert!(Tensor::from_bytes(DType::I8, &[1], &[1]).unwrap().to_f32_vec().is_err());
    assert!(Tensor::from_bytes(DType::F32, &[2], &[0; 7]).is_err(), "length must match the shape");
}

#[test]
fn dtype_names_round_trip() {
    for name in [
        "BOOL", "U8", "I8", "F8_E4M3", "F8_E8M0", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "I64", "U64", "F64",
    ] {
        assert_eq!(DType::from_safetensors_name(name).unwrap().safetensors_name(), name);
    }
    assert_eq!(DType::from_safetensors_name("I8"), Some(DType::I8), "packed fp4 is read as I8, then reinterpreted");
    assert_eq!(DType::from_safetensors_name("F8_E5M2"), None);
}
