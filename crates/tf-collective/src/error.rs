use std::time::Duration;

/// Why a collective failed; every rank of the call gets the same value, so lockstep survives errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommError {
    #[error("rank {rank} left the group, so no further collective can complete")]
    PeerGone { rank: usize },
    #[error("collective did not complete within {after:?}; the group is now unusable")]
    Timeout { after: Duration },
    #[error("ranks called different collectives: {detail}")]
    OpMismatch { detail: String },
    #[error("buffer lengths do not fit the collective: {detail}")]
    LengthMismatch { detail: String },
    #[error("the transport failed ({detail}); the group is now unusable")]
    Transport { detail: String },
    #[error("rank {rank} names peer {peer}, out of range for world size {world}")]
    PeerOutOfRange { rank: usize, peer: usize, world: usize },
    #[error("root {root} given by rank {rank} is out of range for world size {world}")]
    RootOutOfRange { rank: usize, root: usize, world: usize },
}
