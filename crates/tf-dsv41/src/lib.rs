//! The DeepSeek-V4.1-Flash family: config, layer roles, and (next) weights and the CPU reference forward.

pub mod config;
pub mod rope;

pub use config::{Config, ConfigError};
