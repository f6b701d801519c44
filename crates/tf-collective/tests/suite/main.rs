mod all_reduce;
mod failures;
mod harness;
mod profile;
mod shapes;
