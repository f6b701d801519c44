//! The one error type of tf-engram: every variant names the table, layer or value at fault.

/// An error from building the hash layout, hashing tokens or gathering table rows.
#[derive(Debug, thiserror::Error)]
pub enum EngramError {
    #[error(transparent)]
    Core(#[from] tf_core::Error),
    #[error("engram config: {0}")]
    Config(String),
    #[error("token map: {0}")]
    TokenMap(String),
    #[error("token id {token} is outside the token map ({len} ids)")]
    TokenOutOfRange { token: u32, len: usize },
    #[error("compressed id {id} is outside 0..{classes} (and is not DEAD = -1)")]
    CompressedOutOfRange { id: i64, classes: u32 },
    #[error("cannot roll back {requested} tokens: the history keeps only {available}")]
    Rollback { requested: u64, available: u64 },
    #[error("engram table `{table}`: row id {id} is out of range ({rows} rows)")]
    IdOutOfRange { table: String, id: u64, rows: u64 },
    #[error("engram table `{table}`: {msg}")]
    BadTable { table: String, msg: String },
}

/// Result with tf-engram's error.
pub type Result<T, E = EngramError> = std::result::Result<T, E>;
