//! The error of tf-dsv41's public edge (loading, the family trait): each cause kept as its own crate's type.

use std::path::PathBuf;

/// What loading or stepping a dsv41 model can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CPU step, a weight file or a tensor (tf-core's error; its message names the file or tensor).
    #[error(transparent)]
    Core(#[from] tf_core::Error),
    /// A CUDA call, kernel or allocation (tf-cuda's error; its message names the call).
    #[error(transparent)]
    Cuda(#[from] tf_cuda::Error),
    /// The shipped gate model could not be expanded into the cache.
    #[error(transparent)]
    GateModel(#[from] crate::gate_model::GateModelError),
    /// A checkpoint directory that does not load.
    #[error("{dir}: {source}")]
    Load { dir: PathBuf, source: tf_core::Error },
    /// A GPU that does not open.
    #[error("GPU {ordinal}: {source}")]
    OpenGpu { ordinal: usize, source: tf_cuda::Error },
    /// Every tensor-parallel rank refused the same step (that request fails; serving goes on).
    #[error("{0}")]
    Refused(String),
    /// The ranks disagree or one is gone: no step can be trusted again (the server exits 70 for its supervisor).
    #[error("lockstep_lost: {0}")]
    LockstepLost(String),
}
