//! The shipped gate model (issue 21): a compact file of the used vocabulary rows (`tools/gate_model/compact.py`), expanded once into the official layout.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};
use sha2::{Digest, Sha256};

/// The compact format this build expands.
pub const FORMAT: &str = "tf-gate-compact-1";
const SHARD: &str = "model-00001-of-00001.safetensors";
const VOCAB: [&str; 4] = ["embed.weight", "head.weight", "markov_head.embed.weight", "markov_head.head.weight"];

#[derive(Debug, thiserror::Error)]
pub enum GateModelError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {why}")]
    Format { path: PathBuf, why: String },
    #[error("{path}: sha256 {got}, expected {want} (a git-lfs pointer or a changed file?)")]
    Checksum { path: PathBuf, want: String, got: String },
}

/// The repository's gate model: `assets/gate-model` beside the sources, else under the working directory.
pub fn gate_model_assets() -> PathBuf {
    repo_assets("gate-model")
}

/// The repository's DeepSeek-V4 tokenizer and Engram token map, which the expanded gate model copies.
pub fn deepseek_v4_assets() -> PathBuf {
    repo_assets("deepseek-v4")
}

/// `assets/{name}` beside the sources, else under the working directory.
fn repo_assets(name: &str) -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets").join(name);
    // A binary carried to another machine runs from a checkout's root, where the build path does not exist.
    if built.is_dir() { built } else { Path::new("assets").join(name) }
}

/// `assets/gate-model/gate-model.json`: what the compact file and its expansion hash to.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Manifest {
    pub compact_sha256: String,
    pub expanded_sha256: String,
}

impl Manifest {
    pub fn read(assets: &Path) -> Result<Manifest, GateModelError> {
        let path = assets.join("gate-model.json");
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        serde_json::from_str(&text).map_err(|e| GateModelError::Format { path, why: e.to_string() })
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GateModelError + '_ {
    move |source| GateModelError::Io { path: path.to_path_buf(), source }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn is_vocab(name: &str) -> bool {
    VOCAB[..2].contains(&name) || (name.contains(".markov_head.") && VOCAB[2..].iter().any(|v| name.ends_with(v)))
}

/// The cache directory of the shipped model, expanded on first use (checksums checked on the way in and out).
pub fn ensure(assets: &Path, cache_root: &Path) -> Result<PathBuf, GateModelError> {
    let m = Manifest::read(assets)?;
    let dir = cache_root.join(format!("gate-model-{}", &m.expanded_sha256[..12]));
    if dir.join("model.safetensors.index.json").is_file() {
        return Ok(dir);
    }
    // One scratch directory per process and thread: tests and servers may expand at the same time.
    let tmp = dir.with_extension(format!("partial-{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let got = expand(assets, &tmp, Some(&m.compact_sha256))?;
    if got != m.expanded_sha256 {
        let path = tmp.join(SHARD);
        return Err(GateModelError::Checksum { path, want: m.expanded_sha256, got });
    }
    if let Err(e) = std::fs::rename(&tmp, &dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another expansion finished first: its directory holds the same checked bytes.
        if !dir.join("model.safetensors.index.json").is_file() {
            return Err(io(&dir)(e));
        }
    }
    Ok(dir)
}

/// A model directory to load: a compact gate model (it has `gate-model.json`) expands into the cache first.
pub fn resolve(dir: &Path) -> Result<PathBuf, GateModelError> {
    if dir.join("gate-model.json").is_file() { ensure(dir, &tf_core::cache_dir()) } else { Ok(dir.to_path_buf()) }
}

/// Writes the official layout of `compact_dir` into `out` and returns the shard's sha256.
pub fn expand(compact_dir: &Path, out: &Path, want_sha: Option<&str>) -> Result<String, GateModelError> {
    let path = compact_dir.join("model.safetensors");
    let raw = std::fs::read(&path).map_err(io(&path))?;
    if let Some(want) = want_sha {
        let got = sha256_hex(&raw);
        if got != want {
            return Err(GateModelError::Checksum { path, want: want.into(), got });
        }
    }
    let bad = |why: String| GateModelError::Format { path: path.clone(), why };
    let (_, meta) = SafeTensors::read_metadata(&raw).map_err(|e| bad(e.to_string()))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    if meta.get("format").map(String::as_str) != Some(FORMAT) {
        return Err(bad(format!("not {FORMAT} (metadata {meta:?})")));
    }
    let st = SafeTensors::deserialize(&raw).map_err(|e| bad(e.to_string()))?;
    let vocab: usize = meta.get("vocab").and_then(|v| v.parse().ok()).ok_or_else(|| bad("no vocab size".into()))?;
    let tensor = |name: &str| st.tensor(name).map_err(|e| bad(format!("{name}: {e}")));
    let ids: Vec<usize> = tensor("used_ids")?
        .data()
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect();
    if ids.iter().any(|&i| i >= vocab) || ids.windows(2).any(|w| w[0] >= w[1]) {
        return Err(bad("used_ids must be increasing and below the vocab size".into()));
    }
    let rest = tensor("head.weight.rest")?;
    let tied = meta.get("tied_head").filter(|s| !s.is_empty()).cloned();
    let mut full: HashMap<String, (Dtype, Vec<usize>, Vec<u8>)> = HashMap::new();
    let mut names: Vec<String> =
        st.names().into_iter().filter(|n| *n != "used_ids" && !n.ends_with(".rest")).map(str::to_string).collect();
    if let Some(src) = &tied {
        names.push("head.weight".into());
        if st.tensor(src).is_err() {
            return Err(bad(format!("tied_head names {src}, which is absent")));
        }
    }
    for name in names {
        let src = if name == "head.weight" { tied.as_deref().unwrap_or(&name) } else { &name };
        let t = tensor(src)?;
        if !is_vocab(&name) {
            full.insert(name, (t.dtype(), t.shape().to_vec(), t.data().to_vec()));
            continue;
        }
        let (rows, cols) = match t.shape() {
            [r, c] if *r == ids.len() => (*r, *c),
            s => return Err(bad(format!("{name}: shape {s:?}, expected [{}, _]", ids.len()))),
        };
        let row = t.data().len() / rows;
        let mut data = if name == "head.weight" {
            if rest.data().len() != row {
                return Err(bad(format!("head.weight.rest has {} bytes, a row {row}", rest.data().len())));
            }
            rest.data().repeat(vocab)
        } else {
            vec![0u8; vocab * row]
        };
        for (k, &id) in ids.iter().enumerate() {
            data[id * row..(id + 1) * row].copy_from_slice(&t.data()[k * row..(k + 1) * row]);
        }
        full.insert(name, (t.dtype(), vec![vocab, cols], data));
    }
    write_dir(compact_dir, out, &full)
}

fn write_dir(
    compact_dir: &Path,
    out: &Path,
    full: &HashMap<String, (Dtype, Vec<usize>, Vec<u8>)>,
) -> Result<String, GateModelError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    let views: Vec<(String, TensorView)> = full
        .iter()
        .map(|(n, (d, s, b))| (n.clone(), TensorView::new(*d, s.clone(), b).expect("sizes checked above")))
        .collect();
    let shard = out.join(SHARD);
    let bytes = safetensors::serialize(views, None)
        .map_err(|e| GateModelError::Format { path: shard.clone(), why: e.to_string() })?;
    std::fs::write(&shard, &bytes).map_err(io(&shard))?;
    let mut names: Vec<&String> = full.keys().collect();
    names.sort();
    let weight_map: serde_json::Map<String, serde_json::Value> =
        names.into_iter().map(|k| (k.clone(), SHARD.into())).collect();
    let total: usize = full.values().map(|(_, _, b)| b.len()).sum();
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    let index_path = out.join("model.safetensors.index.json");
    std::fs::write(&index_path, serde_json::to_string_pretty(&index).expect("JSON") + "\n").map_err(io(&index_path))?;
    // DeepSeek's reference reads inference/config.json (tools/golden runs it on the gate model).
    let hf = compact_dir.join("config.json");
    let text = std::fs::read_to_string(&hf).map_err(io(&hf))?;
    let cfg = crate::Config::from_hf_json(&text)
        .map_err(|e| GateModelError::Format { path: hf.clone(), why: e.to_string() })?;
    let inference = out.join("inference");
    std::fs::create_dir_all(&inference).map_err(io(&inference))?;
    let reference = inference.join("config.json");
    std::fs::write(&reference, serde_json::to_string_pretty(&cfg).expect("config serializes") + "\n")
        .map_err(io(&reference))?;
    let assets = deepseek_v4_assets();
    for (from, to) in [
        (hf, "config.json"),
        (assets.join("tokenizer.json"), "tokenizer.json"),
        (assets.join("token_map.u32"), "engram_token_map.u32"),
    ] {
        std::fs::copy(&from, out.join(to)).map_err(io(&from))?;
    }
    Ok(sha256_hex(&bytes))
}
