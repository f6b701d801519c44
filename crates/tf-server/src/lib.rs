//! TensorFold-rs server crate: the `tf` command line (and, in later work, the OpenAI-compatible server).

pub mod generate;
pub mod inspect;
pub mod lanes;
pub mod tokenizer;
