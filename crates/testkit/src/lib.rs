//! Test fixtures shared by fabrx crates: throwaway PostgreSQL clusters, simulation harnesses.

pub mod pg;
pub mod sim;
