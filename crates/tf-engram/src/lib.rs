#![doc = include_str!("../README.md")]

mod cache;
mod error;
mod hasher;
mod history;
mod layout;
pub mod multipliers;
pub mod numpy_rng;
pub mod primes;
mod readahead;
mod readers;
pub mod store;
mod table;
mod token_map;

pub use cache::{CachedTable, Clock};
pub use error::{EngramError, Result};
pub use hasher::{NgramHasher, NgramIds};
pub use history::{DEAD, DEFAULT_MAX_ROLLBACK, NgramHistory};
pub use layout::{EngramConfig, EngramLayout};
pub use multipliers::{Multipliers, multipliers, multipliers_n};
pub use readahead::{ChunkRows, ReadAhead};
pub use readers::reader_threads;
pub use store::{AlignedBuf, FileTable, IoMode, packed_header, write_packed};
pub use table::{EngramTable, SCALE_BLOCK, TensorTable, dequant_row};
pub use token_map::{DEEPSEEK_V4_CLASSES, DEEPSEEK_V4_TOKEN_MAP, DEEPSEEK_V4_VOCAB, TokenMap};
