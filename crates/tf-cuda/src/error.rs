//! What can go wrong finding NVRTC, compiling a kernel or caching its module.

use crate::Arch;
use std::path::PathBuf;

/// Errors of the CUDA backend; each names the kernel or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("NVRTC not available: {0}")]
    NvrtcNotFound(String),
    #[error("kernel `{kernel}` did not compile for {arch} ({code}); options {options:?}; NVRTC log:\n{log}")]
    Compile { kernel: String, arch: Arch, code: String, options: Vec<String>, log: String },
    #[error("kernel `{kernel}` for {arch}: {call} failed ({code})")]
    Nvrtc { kernel: String, arch: Arch, call: &'static str, code: String },
    #[error("kernel `{kernel}`: {what}")]
    BadSpec { kernel: String, what: String },
    #[error("kernel cache {}: {source}", path.display())]
    Cache { path: PathBuf, source: std::io::Error },
}
