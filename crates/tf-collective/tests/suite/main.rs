mod all_reduce;
mod failures;
mod harness;
mod shapes;
