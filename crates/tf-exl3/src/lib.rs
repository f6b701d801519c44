#![doc = include_str!("../README.md")]

pub mod cuda;
mod fp4;

pub use fp4::Fp4Weight;
