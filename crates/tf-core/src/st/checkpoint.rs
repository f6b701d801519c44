//! A checkpoint of one or many safetensors shards, found through `model.safetensors.index.json` or by listing.

use super::file::{SafetensorsFile, TensorEntry};
use crate::error::{Error, Result};
use crate::{DType, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The standard index file name of a sharded Hugging Face checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Every tensor of a checkpoint, each found in exactly one mapped shard.
pub struct Checkpoint {
    root: PathBuf,
    shards: Vec<SafetensorsFile>,
    owner: BTreeMap<String, usize>,
}

impl Checkpoint {
    /// Opens a directory (index file if present, else every `*.safetensors`), an index file, or one shard.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        if path.is_dir() {
            let index = path.join(INDEX_FILE);
            return if index.is_file() { Self::from_index(&index) } else { Self::from_dir(path) };
        }
        if path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".index.json")) {
            return Self::from_index(path);
        }
        Self::from_shards(path, vec![path.to_path_buf()])
    }

    /// Every `*.safetensors` present in a directory, ignoring an index (a folder holding only some of a release's shards), or one shard.
    pub fn open_present(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        if path.is_dir() { Self::from_dir(path) } else { Self::open(path) }
    }

    fn from_dir(dir: &Path) -> Result<Checkpoint> {
        let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        let mut files = Vec::new();
        for entry in rd {
            let p = entry.map_err(|e| Error::io(dir, e))?.path();
            if p.extension().is_some_and(|x| x == "safetensors") {
                files.push(p);
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(Error::bad_file(dir, "no *.safetensors files and no model.safetensors.index.json"));
        }
        Self::from_shards(dir, files)
    }

    fn from_index(index: &Path) -> Result<Checkpoint> {
        let text = std::fs::read_to_string(index).map_err(|e| Error::io(index, e))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::bad_file(index, format!("not JSON: {e}")))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| Error::bad_file(index, "no `weight_map` object"))?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut files: Vec<PathBuf> = Vec::new();
        for (name, file) in map {
            let file = file.as_str().ok_or_else(|| Error::bad_file(index, format!("`{name}` maps to a non-string")))?;
            let p = dir.join(file);
            if !files.contains(&p) {
                files.push(p);
            }
        }
        files.sort();
        let ckpt = Self::from_shards(dir, files)?;
        for (name, file) in map {
            let listed = dir.join(file.as_str().unwrap_or_default());
            match ckpt.owner.get(name) {
                Some(&i) if ckpt.shards[i].path() == listed => {}
                Some(&i) => {
                    let found = ckpt.shards[i].path().display();
                    return Err(Error::bad_file(index, format!("`{name}` is listed in {file} but stored in {found}")));
                }
                None => return Err(Error::bad_tensor(listed, name, "listed in the index but absent from its shard")),
            }
        }
        Ok(ckpt)
    }

    fn from_shards(root: &Path, files: Vec<PathBuf>) -> Result<Checkpoint> {
        let mut shards = Vec::with_capacity(files.len());
        let mut owner = BTreeMap::new();
        for (i, f) in files.iter().enumerate() {
            let shard = SafetensorsFile::open(f)?;
            for name in shard.names() {
                if let Some(prev) = owner.insert(name.to_string(), i) {
                    let other = shards.get(prev).map_or(f.as_path(), |s: &SafetensorsFile| s.path()).display();
                    return Err(Error::bad_tensor(f, name, format!("also stored in {other}")));
                }
            }
            shards.push(shard);
        }
        Ok(Checkpoint { root: root.to_path_buf(), shards, owner })
    }

    /// Directory (or file) the checkpoint was opened from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn shards(&self) -> &[SafetensorsFile] {
        &self.shards
    }

    /// All tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.owner.keys().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.owner.contains_key(name)
    }

    /// Where a tensor lives and what it holds.
    pub fn entry(&self, name: &str) -> Option<(&Path, &TensorEntry)> {
        let &i = self.owner.get(name)?;
        let shard = &self.shards[i];
        shard.entry(name).map(|e| (shard.path(), e))
    }

    /// A zero-copy view of a tensor, or an error naming it.
    pub fn get(&self, name: &str) -> Result<Tensor> {
        match self.owner.get(name) {
            Some(&i) => self.shards[i].tensor(name),
            None => Err(Error::MissingTensor { name: name.to_string(), searched: self.root.display().to_string() }),
        }
    }

    /// A tensor that must have this dtype and shape.
    pub fn get_checked(&self, name: &str, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        let t = self.get(name)?;
        if t.dtype() != dtype {
            return Err(Error::DTypeMismatch { name: name.to_string(), expected: dtype, found: t.dtype() });
        }
        if t.shape() != shape {
            return Err(Error::ShapeMismatch {
                name: name.to_string(),
                expected: shape.to_vec(),
                found: t.shape().to_vec(),
            });
        }
        Ok(t)
    }
}
