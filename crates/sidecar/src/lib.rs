//! The committer's sidecar (FX §3.2) and the in-process committer pipeline:
//! blocks in, structural checks, the coordinator's dependency graph, signature
//! verification, the validator-committer, statuses out per block, in block order.
//!
//! - [`blockfile`] reads the JSON Lines block format of `fabrx committer apply`;
//! - [`intake`] decides what a block's txs need (structural status, duplicate id);
//! - [`pipeline`] wires intake → coordinator → sigverifier → vcservice in one process.

pub mod blockfile;
pub mod intake;
pub mod pipeline;

/// Errors of the sidecar.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A line of a block file is not valid.
    #[error("line {line}: {detail}")]
    BlockFile {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        detail: String,
    },
    /// Blocks must arrive in order.
    #[error("expected block {expected}, got {got}")]
    OutOfOrder {
        /// The next block number.
        expected: u64,
        /// The block number seen.
        got: u64,
    },
    /// The dependency graph refused an input.
    #[error("coordinator: {0}")]
    Coordinator(#[from] coordinator::Error),
    /// The validator-committer failed (no status was decided).
    #[error("vcservice: {0}")]
    Vcservice(#[from] vcservice::Error),
    /// A policy key does not parse.
    #[error("policy: {0}")]
    Policy(#[from] sigverifier::Error),
}

/// Result alias of the sidecar.
pub type Result<T> = std::result::Result<T, Error>;
