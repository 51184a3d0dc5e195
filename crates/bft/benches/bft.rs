//! Placeholder until the bft benches land.
fn main() {}
