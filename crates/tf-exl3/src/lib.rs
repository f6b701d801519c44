#![doc = include_str!("../README.md")]

pub mod cuda;
pub mod exl3;
pub mod exl3_bytedot;
pub mod exl3_cuda;
pub mod exl3_mma;
pub mod exl3_prompt;
mod fp4;
mod fp4_grouped;

pub use exl3::{Codebook, Exl3Weight};
pub use fp4::Fp4Weight;
pub use fp4_grouped::{Fp4Groups, TILE_ROWS, fp4_gemv_grouped, fp4_group, group_cap, group_pairs};
