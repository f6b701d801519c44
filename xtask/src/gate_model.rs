//! `cargo xtask gate-model`: installs a compact gate model into assets/gate-model with its hashes, or expands the installed one.

use std::path::PathBuf;
use std::process::ExitCode;

use sha2::{Digest, Sha256};
use tf_dsv41::gate_model::{Manifest, expand, gate_model_assets};

const USAGE: &str = "\
usage: cargo xtask gate-model install --from DIR | expand --out DIR

  install --from DIR   copy DIR's model.safetensors (or its .partN pieces) and config.json into assets/gate-model,
                       expand it once and write gate-model.json (the compact and expanded sha256)
  expand --out DIR     write the installed model in the official layout (what tf serve puts in its cache)";

pub fn run(args: &[String]) -> ExitCode {
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(PathBuf::from);
    let result = match (args.first().map(String::as_str), flag("--from"), flag("--out")) {
        (Some("install"), Some(from), _) => install(&from),
        (Some("expand"), _, Some(out)) => expand_installed(&out),
        (Some("-h" | "--help") | None, ..) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("error: bad arguments\n\n{USAGE}");
            return ExitCode::from(crate::USAGE_ERROR);
        }
    };
    match result {
        Ok(msg) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gate-model: {e}");
            ExitCode::FAILURE
        }
    }
}

fn read_compact(from: &std::path::Path) -> Result<Vec<u8>, String> {
    let whole = from.join("model.safetensors");
    if whole.is_file() {
        return std::fs::read(&whole).map_err(|e| format!("{}: {e}", whole.display()));
    }
    // A GPU call returns files of at most 16 MiB, so the compact file may come back in pieces.
    let mut bytes = Vec::new();
    for i in 0.. {
        let part = from.join(format!("model.safetensors.part{i}"));
        if !part.is_file() {
            break;
        }
        bytes.extend(std::fs::read(&part).map_err(|e| format!("{}: {e}", part.display()))?);
    }
    if bytes.is_empty() {
        return Err(format!("{}: no model.safetensors or model.safetensors.part0", from.display()));
    }
    Ok(bytes)
}

fn install(from: &std::path::Path) -> Result<String, String> {
    let assets = gate_model_assets();
    std::fs::create_dir_all(&assets).map_err(|e| format!("{}: {e}", assets.display()))?;
    let bytes = read_compact(from)?;
    let compact_sha: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(assets.join("model.safetensors"), &bytes).map_err(|e| e.to_string())?;
    std::fs::copy(from.join("config.json"), assets.join("config.json")).map_err(|e| format!("config.json: {e}"))?;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let expanded_sha = expand(&assets, tmp.path(), Some(&compact_sha)).map_err(|e| e.to_string())?;
    let manifest = serde_json::json!({"compact_sha256": compact_sha, "expanded_sha256": expanded_sha});
    let text = serde_json::to_string_pretty(&manifest).expect("JSON") + "\n";
    std::fs::write(assets.join("gate-model.json"), text).map_err(|e| e.to_string())?;
    Ok(format!("installed {} bytes into {}: {manifest}", bytes.len(), assets.display()))
}

fn expand_installed(out: &std::path::Path) -> Result<String, String> {
    let assets = gate_model_assets();
    let m = Manifest::read(&assets).map_err(|e| e.to_string())?;
    let got = expand(&assets, out, Some(&m.compact_sha256)).map_err(|e| e.to_string())?;
    if got != m.expanded_sha256 {
        return Err(format!("expanded sha256 {got}, the manifest says {}", m.expanded_sha256));
    }
    Ok(format!("{} (shard sha256 {got})", out.display()))
}
