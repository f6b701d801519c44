//! Writing a synthetic checkpoint directory in the official layout: shards, index, configs, tokenizer, token map.

use super::configs::TinyKind;
use super::init::generate;
use super::tokenizer::{tiny_token_map, tokenizer_json};
use crate::gate_model::deepseek_v4_assets;
use crate::inventory::{Param, params};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// A failure while writing, naming the file or asset at fault.
#[derive(Debug, thiserror::Error)]
pub enum TinyError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("required asset {path} is missing: {why}")]
    MissingAsset { path: PathBuf, why: String },
    #[error(transparent)]
    Core(#[from] tf_core::Error),
}

/// What was written.
#[derive(Clone, Debug)]
pub struct Written {
    pub files: Vec<PathBuf>,
    pub n_tensors: usize,
    /// Bytes of tensor data over all shards (the index's `total_size`).
    pub tensor_bytes: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TinyError + '_ {
    move |source| TinyError::Io { path: path.to_path_buf(), source }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), TinyError> {
    std::fs::write(path, bytes).map_err(io(path))
}

fn pretty(v: &impl serde::Serialize) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(v).expect("JSON values serialize");
    s.push('\n');
    s.into_bytes()
}

/// Tokenizer JSON and token-map bytes: generated for tiny, copied from the assets for small.
fn tokenizer_files(kind: TinyKind) -> Result<(Vec<u8>, Vec<u8>), TinyError> {
    let cfg = kind.config();
    if kind == TinyKind::Tiny {
        let vocab = cfg.vocab_size as u32;
        let tok = pretty(&tokenizer_json(vocab, cfg.image_token_id, cfg.dspark_noise_token_id));
        let map: Vec<u8> = tiny_token_map(vocab).iter().flat_map(|t| t.to_le_bytes()).collect();
        return Ok((tok, map));
    }
    let dir = deepseek_v4_assets();
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|e| TinyError::MissingAsset { path, why: e.to_string() })
    };
    let tok = read("tokenizer.json")?;
    let map = read("token_map.u32")?;
    let ids = map.len() / 4;
    let classes = map.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).max().map_or(0, |m| m + 1);
    if ids != cfg.vocab_size || u64::from(classes) != cfg.engram_compressed_vocab_size {
        let why = format!(
            "{ids} ids and {classes} classes, expected {} and {}",
            cfg.vocab_size, cfg.engram_compressed_vocab_size
        );
        return Err(TinyError::MissingAsset { path: dir.join("token_map.u32"), why });
    }
    Ok((tok, map))
}

/// Splits parameters into `n` contiguous runs of about equal bytes; a weight and its scale stay together.
fn plan_shards(ps: &[Param], n: usize) -> Vec<Vec<&Param>> {
    let total: usize = ps.iter().map(Param::nbytes).sum();
    let mut shards: Vec<Vec<&Param>> = vec![Vec::new(); n];
    let mut acc = 0usize;
    for p in ps {
        let i = (acc * n / total.max(1)).min(n - 1);
        shards[i].push(p);
        acc += p.nbytes();
    }
    shards
}

/// Writes the whole checkpoint for `kind` into `out` (created if needed); the same seed gives the same bytes.
pub fn write_checkpoint(kind: TinyKind, seed: u64, out: &Path) -> Result<Written, TinyError> {
    let cfg = kind.config();
    let (tokenizer, token_map) = tokenizer_files(kind)?;
    let inference = out.join("inference");
    std::fs::create_dir_all(&inference).map_err(io(&inference))?;
    let ps = params(&cfg);
    let plan = plan_shards(&ps, kind.shards());
    let mut files = Vec::new();
    let mut weight_map = BTreeMap::new();
    let (mut n_tensors, mut tensor_bytes) = (0usize, 0u64);
    for (i, shard) in plan.iter().enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", i + 1, plan.len());
        let tensors: Vec<(String, tf_core::Tensor)> = shard.iter().flat_map(|p| generate(seed, p)).collect();
        for (name, t) in &tensors {
            weight_map.insert(name.clone(), file.clone());
            tensor_bytes += t.nbytes() as u64;
        }
        n_tensors += tensors.len();
        let refs: Vec<(&str, &tf_core::Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let path = out.join(&file);
        let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
        tf_core::st::write::write_file(&path, &refs, Some(meta))?;
        files.push(path);
    }
    let index = serde_json::json!({"metadata": {"total_size": tensor_bytes}, "weight_map": weight_map});
    let texts: [(PathBuf, Vec<u8>); 5] = [
        (out.join(tf_core::st::INDEX_FILE), pretty(&index)),
        (out.join("config.json"), pretty(&kind.hf_json())),
        (inference.join("config.json"), pretty(&cfg)),
        (out.join("tokenizer.json"), tokenizer),
        (out.join("engram_token_map.u32"), token_map),
    ];
    for (path, bytes) in texts {
        write(&path, &bytes)?;
        files.push(path);
    }
    Ok(Written { files, n_tensors, tensor_bytes })
}
