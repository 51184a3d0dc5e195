//! The development network of fabrx: what `fabrx up`, `down`, `status` and the bench
//! suites share, as library code the command-line shell calls.
//!
//! * [`bench`] — the `fabrx bench ordering|committer|e2e` suites: plans, runs, reports;
//!   `fabrx bench vc`, the validator-committer alone ([`bench::vc`]).
//! * [`file`] — `network.json`, typed: what `fabrx up` started.
//! * [`pg`] — PostgreSQL administration (naming and creating the databases a `--db` URL
//!   implies), in one place.
//! * [`status`] — the metrics of `fabrx status --watch`: scraping every node's
//!   `/metrics`, parsing a page, each role's metric names, the table.
//! * [`height`] — the heights `fabrx status` probes (assembler, sidecar, consenter).
//! * [`cpu`] — CPU time of a process, for cost per tx.
//! * [`proxy`] — the latency proxy: regions emulated on one machine.
//! * [`up`] — starting and stopping a network of processes (`fabrx up`, `fabrx down`).
//! * [`token`] — the token application of a network: the wallet's view of it and its
//!   genesis (the token namespace, the issuer's wallet).
//! * [`load`] — `fabrx loadgen --target network|mock-orderer|committer`: a load through
//!   a running network's routers, the committer behind a mock orderer, or the committer
//!   pipeline in this process; the summaries.

pub mod bench;
pub mod cpu;
pub mod file;
pub mod height;
pub mod load;
pub mod pg;
pub mod proxy;
pub mod status;
pub mod token;
pub mod up;

/// Errors of the development network's library code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A file does not parse (or could not be encoded).
    #[error("{} does not parse: {reason}", path.display())]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// The network config could not be generated, read or used.
    #[error(transparent)]
    Config(#[from] netconfig::Error),
    /// A wallet call failed.
    #[error(transparent)]
    Wallet(#[from] wallet::Error),
    /// A node could not be started, or did not become ready.
    #[error("{name} {reason}")]
    Node {
        /// The node.
        name: String,
        /// What happened.
        reason: String,
    },
    /// The token application could not be set up.
    #[error("token setup: {0}")]
    Token(String),
    /// The options contradict each other or the network.
    #[error("{0}")]
    Usage(String),
    /// A database could not be named, created or dropped.
    #[error("{what}: {reason}")]
    Database {
        /// What was done, or the value refused.
        what: String,
        /// Why it failed.
        reason: String,
    },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, Error>;
