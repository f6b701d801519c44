#![doc = include_str!("../README.md")]

pub mod attn;
pub mod config;
pub mod cuda;
pub mod engram;
pub mod error;
pub mod family;
pub mod gate_model;
pub mod inventory;
pub mod linear;
pub mod mhc;
pub mod model;
pub mod moe;
pub mod plan;
pub mod qlinear;
pub mod rope;
pub mod state;
#[cfg(feature = "testkit")]
pub mod tiny;
pub mod tp;
pub mod wquant;

pub use config::{Config, ConfigError};
pub use error::Error;
pub use model::{EXL3_PROMPT_MIN_ROWS, GROUP_EXPERTS, Model, Options, PrefillMxfp4, SP_ROWS, TILED_EXPERTS, TopP};
pub use tf_engram::IoMode as EngramIo;
