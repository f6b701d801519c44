//! tf-server's error outside HTTP (loading, binding, the command lines); a request's refusals are `http::error::ApiError`.

use std::path::PathBuf;

/// What starting the server or `tf generate` can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model: its checkpoint, GPU, gate-model expansion or a step (tf-dsv41's error).
    #[error(transparent)]
    Model(#[from] tf_dsv41::Error),
    /// The tokenizer or a tensor (tf-core's error).
    #[error(transparent)]
    Core(#[from] tf_core::Error),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// No `--model` and no shipped gate model in this checkout.
    #[error(
        "no --model given and the shipped gate model is missing ({manifest} not found): pass --model DIR or restore assets/gate-model"
    )]
    NoGateModel { manifest: PathBuf },
    #[error("bind {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    /// The async runtime or the listening socket.
    #[error(transparent)]
    Serve(#[from] std::io::Error),
    /// Flags that do not go together (the message names them).
    #[error("{0}")]
    Usage(&'static str),
    /// A tensor-parallel group that cannot form (a rank's address, a peer that never came).
    #[error("tensor parallel: {0}")]
    Tp(String),
}

/// A word a flag or setting does not accept, with the words it does.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}` ({expected})")]
pub struct UnknownValue {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static str,
}
