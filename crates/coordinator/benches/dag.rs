//! Placeholder until the coordinator benches land.
fn main() {}
