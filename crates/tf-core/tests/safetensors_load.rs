//! Safetensors checkpoints: sharded loading, zero-copy views, and errors that name the file and tensor.

use std::path::Path;
use tf_core::st::{INDEX_FILE, write};
use tf_core::{Checkpoint, DType, Error, SafetensorsFile, Tensor};

fn t(shape: &[usize], start: f32) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_f32(shape, &(0..n).map(|i| start + i as f32).collect::<Vec<_>>()).unwrap()
}

fn two_shards(dir: &Path, with_index: bool) {
    let (a, b, c) = (
        t(&[2, 3], 0.0),
        t(&[4], 10.0),
        Tensor::from_bytes(DType::F8E4M3, &[2, 2], &[0x38, 0x40, 0xB8, 0x7E]).unwrap(),
    );
    write::write_file(&dir.join("model-00001-of-00002.safetensors"), &[("a.weight", &a), ("c.weight", &c)], None)
        .unwrap();
    write::write_file(&dir.join("model-00002-of-00002.safetensors"), &[("b.bias", &b)], None).unwrap();
    if with_index {
        let idx = r#"{"metadata":{},"weight_map":{"a.weight":"model-00001-of-00002.safetensors","c.weight":"model-00001-of-00002.safetensors","b.bias":"model-00002-of-00002.safetensors"}}"#;
        std::fs::write(dir.join(INDEX_FILE), idx).unwrap();
    }
}

fn err_text(r: Result<impl Sized, Error>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn sharded_with_index_loads_zero_copy() {
    let dir = tempfile::tempdir().unwrap();
    two_shards(dir.path(), true);
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ck.names().collect::<Vec<_>>(), ["a.weight", "b.bias", "c.weight"]);
    let a = ck.get("a.weight").unwrap();
    assert!(a.is_mapped());
    assert_eq!(a.shape(), &[2, 3]);
    assert_eq!(a.to_f32_vec().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(ck.get("b.bias").unwrap().to_f32_vec().unwrap(), vec![10.0, 11.0, 12.0, 13.0]);
    assert_eq!(ck.get("c.weight").unwrap().to_f32_vec().unwrap(), vec![1.0, 2.0, -1.0, 448.0]);
    let (path, entry) = ck.entry("b.bias").unwrap();
    assert!(path.ends_with("model-00002-of-00002.safetensors"));
    assert_eq!(entry.len, 16);
}

#[test]
fn directory_without_index_lists_shards() {
    let dir = tempfile::tempdir().unwrap();
    two_shards(dir.path(), false);
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ck.shards().len(), 2);
    assert!(ck.contains("b.bias"));
}

#[test]
fn missing_tensor_and_mismatches_name_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    two_shards(dir.path(), true);
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert!(err_text(ck.get("layers.0.attn.wq_a.weight")).contains("layers.0.attn.wq_a.weight"));
    let e = err_text(ck.get_checked("a.weight", DType::F32, &[3, 2]));
    assert!(e.contains("a.weight") && e.contains("[3, 2]") && e.contains("[2, 3]"), "{e}");
    let e = err_text(ck.get_checked("a.weight", DType::BF16, &[2, 3]));
    assert!(e.contains("a.weight") && e.contains("BF16") && e.contains("F32"), "{e}");
}

#[test]
fn index_listing_a_tensor_its_shard_lacks_fails_at_open() {
    let dir = tempfile::tempdir().unwrap();
    two_shards(dir.path(), false);
    let idx =
        r#"{"weight_map":{"a.weight":"model-00001-of-00002.safetensors","ghost":"model-00002-of-00002.safetensors"}}"#;
    std::fs::write(dir.path().join(INDEX_FILE), idx).unwrap();
    let e = err_text(Checkpoint::open(dir.path()));
    assert!(e.contains("ghost") && e.contains("model-00002-of-00002.safetensors"), "{e}");
}

#[test]
fn a_tensor_in_two_shards_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write::write_file(&dir.path().join("x1.safetensors"), &[("w", &t(&[2], 0.0))], None).unwrap();
    write::write_file(&dir.path().join("x2.safetensors"), &[("w", &t(&[2], 0.0))], None).unwrap();
    let e = err_text(Checkpoint::open(dir.path()));
    assert!(e.contains("`w`") && e.contains("x1.safetensors") && e.contains("x2.safetensors"), "{e}");
}

fn raw(header: &str, data_len: usize) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.resize(v.len() + data_len, 0);
    v
}

fn open_bytes(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("broken.safetensors");
    std::fs::write(&p, bytes).unwrap();
    let e = err_text(SafetensorsFile::open(&p));
    assert!(e.contains("broken.safetensors"), "error must name the file: {e}");
    e
}

#[test]
fn truncated_file_names_file_and_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.safetensors");
    write::write_file(&p, &[("a", &t(&[4], 0.0)), ("b", &t(&[4], 0.0))], None).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    let e = open_bytes(&bytes[..bytes.len() - 3]);
    assert!(e.contains("`b`") && e.contains("truncated"), "{e}");
    let e = open_bytes(&bytes[..20]);
    assert!(e.contains("truncated"), "{e}");
    let e = open_bytes(&bytes[..5]);
    assert!(e.contains("too short"), "{e}");
}

#[test]
fn header_that_lies_about_sizes_names_the_tensor() {
    let e = open_bytes(&raw(r#"{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}"#, 20));
    assert!(e.contains("`w`") && e.contains("24 bytes") && e.contains("20"), "{e}");
    let e = open_bytes(&raw(r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, 12));
    assert!(e.contains("4 bytes after"), "{e}");
    let e =
        open_bytes(&raw(r#"{"w":{"dtype":"F32","shape":[99999999999,99999999999,99999],"data_offsets":[0,8]}}"#, 8));
    assert!(e.contains("`w`"), "{e}");
}

#[test]
fn unknown_and_unsupported_dtypes_name_the_tensor() {
    let e = open_bytes(&raw(r#"{"q":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}}"#, 2));
    assert!(e.contains("`q`") && e.contains("Q4_K"), "{e}");
    let e = open_bytes(&raw(r#"{"q":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[0,2]}}"#, 2));
    assert!(e.contains("`q`") && e.contains("F8_E5M2") && e.contains("not supported"), "{e}");
}

#[test]
fn garbage_header_is_a_clear_error() {
    let e = open_bytes(&raw("{not json", 0));
    assert!(e.contains("header"), "{e}");
    let mut b = 1u64.to_le_bytes().to_vec();
    b.push(0xFF);
    assert!(open_bytes(&b).contains("header"));
}
