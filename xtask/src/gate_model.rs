//! `cargo xtask gate-model`: installs a compact gate model into assets/gate-model with its hashes, or expands the installed one.

use std::path::PathBuf;
use std::process::ExitCode;

use sha2::{Digest, Sha256};
use tf_dsv41::gate_model::{Manifest, expand, gate_model_assets};

const USAGE: &str = "\
usage: cargo xtask gate-model install --from DIR | expand --out DIR | exl3 --out DIR [--bits K]

  install --from DIR   copy DIR's model.safetensors (or its .partN pieces) and config.json into assets/gate-model,
                       expand it once and write gate-model.json (the compact and expanded sha256)
  expand --out DIR     write the installed model in the official layout (what tf serve puts in its cache)
  exl3 --out DIR       write its EXL3 copy: every FP8/FP4 linear, the head and the bf16 linears TensorFold's
                       published quant converts, as MUL1 trellises of K bits (default 3) from the fallback
                       quantizer; deterministic (the same sha256 on any machine), for gating the EXL3 switches";

pub fn run(args: &[String]) -> ExitCode {
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let flag = |name: &str| value(name).map(PathBuf::from);
    let result = match (args.first().map(String::as_str), flag("--from"), flag("--out")) {
        (Some("install"), Some(from), _) => install(&from),
        (Some("expand"), _, Some(out)) => expand_installed(&out),
        (Some("exl3"), _, Some(out)) => match value("--bits").map(|b| b.parse::<usize>()) {
            None => exl3_copy(&out, EXL3_BITS),
            Some(Ok(k)) if (1..=8).contains(&k) => exl3_copy(&out, k),
            Some(_) => Err("--bits: K from 1 to 8".into()),
        },
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

/// K of the gate model's EXL3 copy: near the 2.9 bits a weight of the published V4.1-Flash quant users run.
pub const EXL3_BITS: usize = 3;

/// Seed of the quantizer's random signs: fixed, so the copy is the same bytes everywhere.
const EXL3_SEED: u64 = 0;

fn exl3_copy(out: &std::path::Path, bits: usize) -> Result<String, String> {
    use tf_dsv41::tiny::exl3::{Codebook, Exl3Mode, convert};
    let t0 = std::time::Instant::now();
    let src = tf_dsv41::gate_model::ensure(&gate_model_assets(), &tf_core::cache_dir()).map_err(|e| e.to_string())?;
    let n = convert(&src, out, Codebook::Mul1, Exl3Mode::QuantizeAt(bits), EXL3_SEED).map_err(|e| e.to_string())?;
    let sha = crate::gate::checkpoint_sha256(out)?;
    let secs = t0.elapsed().as_secs_f64();
    Ok(format!("{}: {n} linears at K={bits} from {} in {secs:.1} s (shard sha256 {sha})", out.display(), src.display()))
}
