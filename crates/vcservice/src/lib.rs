//! The validator-committer of fabrx (FX §3.5): validates the reads of conflict-free
//! transaction batches against committed state and commits their writes and statuses, on
//! PostgreSQL (production; YugabyteDB-ready) or an embedded RocksDB store (default).
//!
//! - [`plan`] is the pure deciding logic (what to read, what is valid, what to write);
//! - [`backend`] holds the two state backends behind one trait;
//! - [`engine`] drives plan + backend with retries and idempotent resubmission;
//! - [`service`] is the gRPC shell with a pipelined batch stream;
//! - [`reads`] checks and bounds the reads of committed state (`ReadRows`, `OwnedRows`).

pub mod backend;
pub mod config;
pub mod engine;
pub mod intake;
pub mod metrics;
pub mod model;
pub mod node;
pub mod plan;
pub mod reads;
pub mod service;

pub use backend::Backend;
pub use backend::embedded::{Durability, EmbeddedBackend};
pub use backend::postgres::{PgBackend, PgOptions, SqlMode};
pub use engine::{Engine, EngineConfig};

/// The largest block number a validator-committer stores (PostgreSQL `INT8`); larger
/// numbers from the wire are refused, never stored truncated.
pub const MAX_BLOCK_NUMBER: u64 = i64::MAX as u64;
pub use model::{CommitResult, CommitSet, NsWrites, OwnedPage, Row, Snapshot, TxOutcome, VcTx};

/// Errors of the vcservice.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A PostgreSQL operation failed.
    #[error("postgres: {source}")]
    Postgres {
        /// The driver error.
        #[from]
        source: sqlx::Error,
    },
    /// A RocksDB operation failed.
    #[error("rocksdb: {source}")]
    Rocks {
        /// The storage error.
        #[from]
        source: rocksdb::Error,
    },
    /// Stored data could not be decoded.
    #[error("corrupt stored {what}: {detail}")]
    Corrupt {
        /// What was being decoded.
        what: &'static str,
        /// Why it failed.
        detail: String,
    },
    /// A namespace id that is not `^[a-z0-9_]{1,60}$` reached the storage layer.
    #[error("invalid namespace id {ns:?}")]
    InvalidNamespace {
        /// The namespace id.
        ns: String,
    },
    /// The configuration is unusable.
    #[error("configuration: {detail}")]
    Config {
        /// What is wrong.
        detail: String,
    },
    /// A backend operation kept failing; no status was decided.
    #[error("backend still failing after {attempts} attempts: {last}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: String,
    },
    /// A blocking storage task panicked or was cancelled.
    #[error("storage task failed: {detail}")]
    Task {
        /// The join error.
        detail: String,
    },
}

impl From<wire::node::ServeError> for Error {
    fn from(e: wire::node::ServeError) -> Error {
        Error::Config {
            detail: format!("vcservice server: {e}"),
        }
    }
}

/// Result alias of the vcservice.
pub type Result<T> = std::result::Result<T, Error>;
