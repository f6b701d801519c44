//! The dsv41 config: read from DeepSeek's `inference/config.json` or HF's `config.json`, validated once.

mod args;
mod flash;
mod hf;
mod roles;
mod validate;

pub use args::Config;
pub use roles::{AttnMode, LayerRole, RopeKind, roles};

use serde_json::Value;
use std::path::Path;

/// A config problem, naming the field at fault.
#[derive(Debug, thiserror::Error)]
#[error("config field `{field}`: {msg}")]
pub struct ConfigError {
    pub field: String,
    pub msg: String,
}

impl ConfigError {
    pub(crate) fn field(field: &str, msg: impl Into<String>) -> ConfigError {
        ConfigError { field: field.to_string(), msg: msg.into() }
    }
}

impl Config {
    /// Parses reference-named JSON (`inference/config.json`) and validates it.
    pub fn from_reference_json(text: &str) -> Result<Config, ConfigError> {
        let cfg: Config =
            serde_json::from_str(text).map_err(|e| ConfigError::field(&unknown_field(&e), e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses an HF `config.json` (`text_config` names), keeping only fields the model uses, and validates it.
    pub fn from_hf_json(text: &str) -> Result<Config, ConfigError> {
        let v: Value = serde_json::from_str(text).map_err(|e| ConfigError::field("config.json", e.to_string()))?;
        let mut map = hf::to_reference_names(&v)?;
        let known = serde_json::to_value(Config::default()).expect("config serializes");
        let known = known.as_object().expect("config is an object");
        map.retain(|k, _| known.contains_key(k));
        let cfg: Config = serde_json::from_value(Value::Object(map))
            .map_err(|e| ConfigError::field(&unknown_field(&e), e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Loads a checkpoint directory's config: `inference/config.json` when present, else `config.json`.
    pub fn load(dir: &Path) -> Result<Config, ConfigError> {
        let reference = dir.join("inference").join("config.json");
        let (path, hf) = if reference.is_file() { (reference, false) } else { (dir.join("config.json"), true) };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ConfigError::field(&path.display().to_string(), e.to_string()))?;
        if hf { Config::from_hf_json(&text) } else { Config::from_reference_json(&text) }
    }
}

/// Best guess at the field a serde error is about (`unknown field `x``, `invalid type ... for key x`).
fn unknown_field(e: &serde_json::Error) -> String {
    let s = e.to_string();
    s.split('`').nth(1).map_or_else(|| "config.json".to_string(), str::to_string)
}
