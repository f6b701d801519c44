//! EXL3 (exllamav3's trellis format, quant.md §1): codebooks, the tile bitstream, and a linear's exact CPU decode.

pub mod codebook;
pub mod encode;
pub mod trellis;
pub mod weight;

pub use codebook::Codebook;
pub use weight::{Exl3Weight, HAD, SPLIT, fwht_blocks};
