//! Benchmarks of the signature verifier (being written).

fn main() {}
