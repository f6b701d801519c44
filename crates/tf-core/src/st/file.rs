//! One safetensors file, memory-mapped; its tensors are zero-copy views into the map.

use super::diagnose::explain;
use crate::error::{Error, Result};
use crate::{DType, Tensor};
use memmap2::Mmap;
use safetensors::SafeTensors;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where one tensor's bytes lie in its file (offsets from the start of the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorEntry {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub start: usize,
    pub len: usize,
}

/// A validated, memory-mapped safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    map: Arc<Mmap>,
    entries: BTreeMap<String, TensorEntry>,
    metadata: BTreeMap<String, String>,
}

/// Parses and validates a whole safetensors buffer: every tensor's range lies inside `bytes` and matches its shape.
pub fn parse_header(path: &Path, bytes: &[u8]) -> Result<(BTreeMap<String, TensorEntry>, BTreeMap<String, String>)> {
    let (header_len, meta) = SafeTensors::read_metadata(bytes).map_err(|e| explain(path, bytes, &e))?;
    let data_start = 8 + header_len;
    let mut entries = BTreeMap::new();
    for (name, info) in meta.tensors() {
        let st_name = format!("{:?}", info.dtype);
        let dtype = DType::from_safetensors_name(&st_name)
            .ok_or_else(|| Error::bad_tensor(path, &name, format!("dtype {st_name} is not supported")))?;
        let (s, e) = info.data_offsets;
        let entry = TensorEntry { dtype, shape: info.shape.clone(), start: data_start + s, len: e - s };
        if entry.start + entry.len > bytes.len() {
            return Err(Error::bad_tensor(path, &name, "data range runs past the end of the file"));
        }
        entries.insert(name, entry);
    }
    let metadata = meta.metadata().clone().unwrap_or_default().into_iter().collect();
    Ok((entries, metadata))
}

impl SafetensorsFile {
    /// Maps and validates `path`; errors name the file and, where one is at fault, the tensor.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        let size = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if size < 8 {
            return Err(Error::bad_file(&path, format!("{size} bytes is too short for a safetensors header")));
        }
        // SAFETY: checkpoints are read-only inputs; a file truncated under us is outside what we can guard.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        let (entries, metadata) = parse_header(&path, &map)?;
        Ok(SafetensorsFile { path, map: Arc::new(map), entries, metadata })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor names in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    pub fn entry(&self, name: &str) -> Option<&TensorEntry> {
        self.entries.get(name)
    }

    /// The `__metadata__` map of the header.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// A zero-copy view of one tensor.
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let e = self.entries.get(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            searched: self.path.display().to_string(),
        })?;
        Ok(Tensor::mapped(e.dtype, e.shape.clone(), self.map.clone(), e.start, e.len))
    }
}
