//! TensorFold-rs server crate: the `tf` command line (and, in later work, the OpenAI-compatible server).

pub mod chat;
pub mod cli;
pub mod error;
pub mod generate;
pub mod http;
pub mod inspect;
pub mod lanes;
pub mod plan;
pub mod tokenizer;

pub use error::Error;
