//! The compressed token map (spec §10.1 step 1): raw token id → normalization class, in first-appearance order.

use crate::{EngramError, Result};
use std::path::Path;

/// The DeepSeek-V4 map as shipped: one little-endian u32 per token id, from `make_token_map.py`.
pub const DEEPSEEK_V4_TOKEN_MAP: &[u8] = include_bytes!("../../../assets/deepseek-v4/token_map.u32");
/// Token ids of the DeepSeek-V4 tokenizer, added tokens included.
pub const DEEPSEEK_V4_VOCAB: usize = 129_280;
/// Classes of the DeepSeek-V4 map; the reference asserts this as `engram_compressed_vocab_size`.
pub const DEEPSEEK_V4_CLASSES: u32 = 99_092;

/// Raw token id → compressed id, where ids whose decoded text normalizes alike share one class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMap {
    map: Vec<u32>,
    classes: u32,
}

impl TokenMap {
    /// Checks that classes are numbered in order of first appearance, as the reference assigns them.
    pub fn new(map: Vec<u32>) -> Result<TokenMap> {
        let mut classes = 0u32;
        for (token, &c) in map.iter().enumerate() {
            if c > classes {
                let msg = format!("token {token} maps to class {c} before class {classes} appeared");
                return Err(EngramError::TokenMap(msg));
            }
            if c == classes {
                classes += 1;
            }
        }
        Ok(TokenMap { map, classes })
    }

    /// Parses the asset format: little-endian u32 per token id.
    pub fn from_le_bytes(bytes: &[u8]) -> Result<TokenMap> {
        if !bytes.len().is_multiple_of(4) {
            return Err(EngramError::TokenMap(format!("{} bytes is not a whole number of u32s", bytes.len())));
        }
        TokenMap::new(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// Reads an asset file written by `make_token_map.py`.
    pub fn open(path: impl AsRef<Path>) -> Result<TokenMap> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| EngramError::TokenMap(format!("{}: {e}", path.display())))?;
        TokenMap::from_le_bytes(&bytes).map_err(|e| match e {
            EngramError::TokenMap(msg) => EngramError::TokenMap(format!("{}: {msg}", path.display())),
            other => other,
        })
    }

    /// The shipped DeepSeek-V4 map, checked against its known vocab and class counts.
    pub fn deepseek_v4() -> Result<TokenMap> {
        let map = TokenMap::from_le_bytes(DEEPSEEK_V4_TOKEN_MAP)?;
        if map.len() != DEEPSEEK_V4_VOCAB || map.classes() != DEEPSEEK_V4_CLASSES {
            let msg = format!("shipped asset has {} ids and {} classes", map.len(), map.classes());
            return Err(EngramError::TokenMap(msg));
        }
        Ok(map)
    }

    /// Number of raw token ids covered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of distinct classes (the compressed vocab size).
    pub fn classes(&self) -> u32 {
        self.classes
    }

    /// The compressed id of a raw token, or `None` past the vocab.
    pub fn get(&self, token: u32) -> Option<u32> {
        self.map.get(token as usize).copied()
    }

    /// The compressed id of a raw token, or an error naming it.
    pub fn compress(&self, token: u32) -> Result<u32> {
        self.get(token).ok_or(EngramError::TokenOutOfRange { token, len: self.map.len() })
    }

    pub fn as_slice(&self) -> &[u32] {
        &self.map
    }
}
