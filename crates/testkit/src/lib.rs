//! Test fixtures shared by fabrx crates: throwaway PostgreSQL clusters, simulation
//! harnesses, the committer's serial oracle and its random workload.
//!
//! testkit depends only on the shared crates (and the BFT engine it simulates), never on
//! a role crate, so that every role may use it as a dev-dependency.

pub mod net;
pub mod oracle;
#[allow(
    clippy::panic,
    clippy::expect_used,
    reason = "a test fixture that cannot start fails the test using it, saying why"
)]
pub mod pg;
#[cfg(feature = "rpcfuzz")]
pub mod rpcfuzz;
#[allow(
    clippy::panic,
    clippy::expect_used,
    reason = "simulation harness: a broken invariant fails the seed, saying which"
)]
#[cfg(feature = "sim")]
pub mod sim;
