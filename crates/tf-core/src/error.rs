//! The one error type of tf-core: every variant names what was wrong and where.

use crate::DType;
use std::path::PathBuf;

/// An error from loading or shaping tensors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {msg}")]
    BadFile { path: PathBuf, msg: String },
    #[error("{path}: tensor `{tensor}`: {msg}")]
    BadTensor { path: PathBuf, tensor: String, msg: String },
    #[error("tensor `{name}` not found in {searched}")]
    MissingTensor { name: String, searched: String },
    #[error("tensor `{name}`: expected shape {expected:?}, found {found:?}")]
    ShapeMismatch { name: String, expected: Vec<usize>, found: Vec<usize> },
    #[error("tensor `{name}`: expected dtype {expected}, found {found}")]
    DTypeMismatch { name: String, expected: DType, found: DType },
    #[error("{0}")]
    Invalid(String),
}

/// Result with tf-core's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn bad_file(path: impl Into<PathBuf>, msg: impl Into<String>) -> Error {
        Error::BadFile { path: path.into(), msg: msg.into() }
    }

    pub(crate) fn bad_tensor(path: impl Into<PathBuf>, tensor: &str, msg: impl Into<String>) -> Error {
        Error::BadTensor { path: path.into(), tensor: tensor.to_string(), msg: msg.into() }
    }
}
