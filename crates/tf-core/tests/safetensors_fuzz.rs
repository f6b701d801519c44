//! Fuzzing the header path with proptest: random and mutated files never panic or read out of bounds.

use proptest::prelude::*;
use std::path::Path;
use tf_core::st::{parse_header, write};
use tf_core::{DType, Tensor};

fn valid_file() -> Vec<u8> {
    let a = Tensor::from_f32(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let b = Tensor::from_bytes(DType::F8E4M3, &[4], &[1, 2, 3, 4]).unwrap();
    let c = Tensor::from_bytes(DType::BF16, &[2], &[0, 0x3F, 0, 0x40]).unwrap();
    write::to_bytes(&[("a", &a), ("b", &b), ("c", &c)], None).unwrap()
}

fn check_in_bounds(bytes: &[u8]) {
    if let Ok((entries, _)) = parse_header(Path::new("fuzz.safetensors"), bytes) {
        for (name, e) in entries {
            assert!(e.start + e.len <= bytes.len(), "{name} out of bounds");
            let need = e.shape.iter().product::<usize>() * e.dtype.size();
            assert_eq!(need, e.len, "{name} length disagrees with its shape");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_in_bounds(&bytes);
    }

    #[test]
    fn random_header_length_prefix(n in any::<u64>(), tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut b = n.to_le_bytes().to_vec();
        b.extend(tail);
        check_in_bounds(&b);
    }

    #[test]
    fn mutated_valid_file(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in any::<prop::sample::Index>(), truncate in any::<bool>()) {
        let mut b = valid_file();
        for (i, v) in flips {
            let i = i.index(b.len());
            b[i] = v;
        }
        if truncate {
            b.truncate(cut.index(b.len()));
        }
        check_in_bounds(&b);
    }

    #[test]
    fn mutated_header_digits(pos in any::<prop::sample::Index>(), digit in b'0'..=b'9') {
        let mut b = valid_file();
        let hlen = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
        let digits: Vec<usize> = (8..8 + hlen).filter(|&i| b[i].is_ascii_digit()).collect();
        let i = digits[pos.index(digits.len())];
        b[i] = digit;
        check_in_bounds(&b);
    }
}

#[test]
fn valid_file_parses() {
    let b = valid_file();
    let (entries, _) = parse_header(Path::new("ok.safetensors"), &b).unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries["b"].dtype, DType::F8E4M3);
}
