//! What can go wrong finding NVRTC or the driver, compiling a kernel, caching its module or running it.

use crate::Arch;
use cudarc::driver::DriverError;
use std::path::PathBuf;

/// Errors of the CUDA backend; each names the kernel, file, buffer or call at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("NVRTC not available: {0}")]
    NvrtcNotFound(std::sync::Arc<crate::nvrtc::NvrtcMissing>),
    #[error("kernel `{kernel}` did not compile for {arch} ({code}); options {options:?}; NVRTC log:\n{log}")]
    Compile { kernel: String, arch: Arch, code: String, options: Vec<String>, log: String },
    #[error("kernel `{kernel}` for {arch}: {call} failed ({code})")]
    Nvrtc { kernel: String, arch: Arch, call: &'static str, code: String },
    #[error("kernel `{kernel}`: {what}")]
    BadSpec { kernel: String, what: String },
    #[error("kernel cache {}: {source}", path.display())]
    Cache { path: PathBuf, source: std::io::Error },
    #[error("no CUDA driver: libcuda.so could not be loaded (is this a GPU machine with the NVIDIA driver installed?)")]
    NoDriver,
    #[error("{what}: {source}")]
    Cuda { what: String, source: DriverError },
    #[error("GPU {ordinal} ({name}) has compute capability {major}.{minor}; tf-cuda builds kernels only for {known}")]
    UnsupportedGpu { ordinal: usize, name: String, major: i32, minor: i32, known: String },
    #[error("{op}: {what}")]
    Launch { op: &'static str, what: String },
}

/// Attaches what was being done to a driver error, lazily so the success path allocates nothing.
pub trait DriverResultExt<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> DriverResultExt<T> for Result<T, DriverError> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|source| Error::Cuda { what: what(), source })
    }
}
