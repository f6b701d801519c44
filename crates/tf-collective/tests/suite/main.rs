mod all_reduce;
mod failures;
mod harness;
mod p2p;
mod profile;
mod shapes;
