//! The fabrx load generator (`fabrx loadgen`, docs/loadgen.md).
//!
//! - [`workload`] plans and pre-signs a UTXO-like token workload: a genesis that creates
//!   the token namespace and issues coins, then blocks of spends with a chosen rate of
//!   double spends and of bad signatures, all deterministic from a seed;
//! - [`oracle`] applies blocks one tx at a time against a plain map (the serial oracle
//!   every committer run can be compared with);
//! - [`histogram`] records latencies in bounded memory and answers percentiles;
//! - [`committer`] drives a workload through the in-process committer pipeline acting as
//!   the orderer, and measures throughput and per-tx latency;
//! - [`network`] sends a workload's txs to a running network's routers and waits for
//!   their statuses from a committer (or their ordering, from an assembler);
//! - [`mock_orderer`] serves a workload's blocks, signed as ordered blocks, on a Deliver
//!   stream to a real sidecar: the committer across processes without the orderer;
//! - [`baseline`] measures the machine's signature-verify ceiling and a one-tx-at-a-time
//!   commit baseline for comparison;
//! - [`series`] aggregates a run per second and per rate step, and paces it
//!   ([`series::Schedule`]);
//! - [`report`] renders the per-second CSV and the SVG report of `--report DIR`;
//! - [`summary`] is the final JSON line.

pub mod baseline;
pub mod committer;
pub mod histogram;
pub mod merge;
pub mod mock_orderer;
pub mod network;
pub mod oracle;
pub mod report;
pub mod series;
mod signer;
pub mod sink;
pub mod summary;
pub mod workload;

pub use histogram::Histogram;
pub use oracle::SerialOracle;
pub use summary::Summary;
pub use workload::{Scheme, Workload, WorkloadSpec};

/// Errors of the load generator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A load parameter is out of range.
    #[error("invalid --{flag}: {detail}")]
    InvalidParam {
        /// The command-line flag the parameter comes from.
        flag: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// Keys could not be derived or dealt.
    #[error("key setup: {detail}")]
    Keys {
        /// What failed.
        detail: String,
    },
    /// The committer pipeline failed (no status was decided).
    #[error("committer pipeline: {0}")]
    Pipeline(#[from] sidecar::Error),
    /// A block of the workload cannot be addressed by heights.
    #[error("workload: {0}")]
    Block(#[from] types::Error),
    /// A namespace policy of the workload is unusable.
    #[error("policy: {0}")]
    Policy(#[from] policy::Error),
    /// The validator-committer failed (no status was decided).
    #[error("validator-committer: {0}")]
    Vcservice(#[from] vcservice::Error),
    /// The namespace of the run exists already (a tag used before on this database).
    #[error("namespace {ns} exists already in this database: use a fresh --tag (or database)")]
    NamespaceExists {
        /// The namespace.
        ns: String,
    },
    /// A genesis tx did not commit, so the load would run against a missing namespace.
    #[error(
        "genesis tx {id} ended {status}, expected COMMITTED (does the namespace already exist? use a fresh --tag or database)"
    )]
    GenesisFailed {
        /// The tx id.
        id: String,
        /// Its status name.
        status: &'static str,
    },
    /// The pipeline emitted something other than the block expected next.
    #[error("pipeline emitted block {got} with {txs} txs, expected block {expected}")]
    UnexpectedBlock {
        /// The block number expected.
        expected: u64,
        /// The block number emitted.
        got: u64,
        /// Its tx count.
        txs: usize,
    },
    /// A blocking worker thread failed.
    #[error("worker thread: {detail}")]
    Task {
        /// The join error.
        detail: String,
    },
}

/// Result alias of the load generator.
pub type Result<T> = std::result::Result<T, Error>;
