#![doc = include_str!("../README.md")]

mod fp4;

pub use fp4::Fp4Weight;
