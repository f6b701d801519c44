//! Turns a safetensors parse failure into an error that names the file and, when it can, the tensor.

use crate::DType;
use crate::error::Error;
use safetensors::SafeTensorError;
use serde_json::Value;
use std::path::Path;

/// Explains why `bytes` (the whole file) failed to parse, re-reading the header to find the guilty tensor.
pub(crate) fn explain(path: &Path, bytes: &[u8], err: &SafeTensorError) -> Error {
    let header_len = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let file_len = bytes.len() as u64;
    if let Some(n) = header_len
        && n.checked_add(8).is_none_or(|end| end > file_len)
    {
        return Error::bad_file(path, format!("header claims {n} bytes but the file holds {file_len} (truncated?)"));
    }
    let header = header_len
        .and_then(|n| bytes.get(8..8 + n as usize))
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(|s| serde_json::from_str::<serde_json::Map<String, Value>>(s).ok());
    let Some(header) = header else {
        return Error::bad_file(path, format!("unreadable header: {err}"));
    };
    let data_len = file_len - 8 - header_len.unwrap_or(0);
    let mut max_end = 0u64;
    for (name, v) in header.iter().filter(|(k, _)| k.as_str() != "__metadata__") {
        if let Some(msg) = tensor_problem(v, data_len) {
            return Error::bad_tensor(path, name, msg);
        }
        max_end = max_end.max(v["data_offsets"][1].as_u64().unwrap_or(0));
    }
    if max_end < data_len {
        return Error::bad_file(path, format!("{} bytes after the last tensor's data", data_len - max_end));
    }
    Error::bad_file(path, format!("invalid header: {err}"))
}

/// What is wrong with one header entry, if anything visible on its own.
fn tensor_problem(v: &Value, data_len: u64) -> Option<String> {
    let dtype = v.get("dtype").and_then(Value::as_str);
    let Some(dtype) = dtype else { return Some("entry has no dtype string".into()) };
    let shape: Option<Vec<u64>> =
        v.get("shape").and_then(Value::as_array).and_then(|a| a.iter().map(Value::as_u64).collect());
    let Some(shape) = shape else { return Some("shape is not a list of sizes".into()) };
    let offs: Option<Vec<u64>> =
        v.get("data_offsets").and_then(Value::as_array).and_then(|a| a.iter().map(Value::as_u64).collect());
    let Some([s, e]) = offs.as_deref().and_then(|o| <[u64; 2]>::try_from(o).ok()) else {
        return Some("data_offsets is not a pair of offsets".into());
    };
    let Some(dt) = DType::from_safetensors_name(dtype) else {
        return Some(format!("unknown or unsupported dtype {dtype:?}"));
    };
    if e < s {
        return Some(format!("data_offsets [{s}, {e}] run backwards"));
    }
    if e > data_len {
        return Some(format!("data ends at byte {e} of {data_len} data bytes (file truncated?)"));
    }
    let need = shape.iter().try_fold(dt.size() as u64, |acc, &d| acc.checked_mul(d));
    match need {
        None => Some(format!("shape {shape:?} overflows")),
        Some(n) if n != e - s => Some(format!("{dt} {shape:?} needs {n} bytes but data_offsets span {}", e - s)),
        Some(_) => None,
    }
}
