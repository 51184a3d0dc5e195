//! Test fixtures shared by fabrx crates: throwaway PostgreSQL clusters, simulation
//! harnesses, the committer's serial oracle and its random workload.
//!
//! testkit depends only on the shared crates (and the BFT engine it simulates), never on
//! a role crate, so that every role may use it as a dev-dependency.

pub mod oracle;
pub mod pg;
pub mod sim;
