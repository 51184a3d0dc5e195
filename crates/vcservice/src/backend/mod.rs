//! State backends: one trait, two implementations (PostgreSQL, embedded RocksDB), one
//! conformance suite (`tests/conformance.rs`).

pub mod embedded;
pub mod postgres;

use crate::Result;
use crate::model::{CommitResult, CommitSet, ReadSet, Row, StatusMap, VersionMap};
use types::TxId;

/// Committed state as the vcservice needs it. Implementations must make
/// [`Backend::commit`] atomic and conditional: either every condition holds and everything
/// is written durably, or nothing is written and [`CommitResult::Conflict`] is returned.
#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Creates the system tables if they do not exist. Idempotent.
    async fn init_schema(&self) -> Result<()>;
    /// Stored statuses of the given ids (absent ids are not in the map).
    async fn statuses(&self, ids: &[TxId]) -> Result<StatusMap>;
    /// Committed versions of the given keys; keys of namespaces that do not exist are absent.
    async fn versions(&self, reads: &ReadSet) -> Result<VersionMap>;
    /// Atomically: store statuses (each row must be new), create namespaces, insert new
    /// keys (each must be absent), update keys (each must still be at the read version),
    /// upsert blind writes.
    async fn commit(&self, set: &CommitSet) -> Result<CommitResult>;
    /// The last fully committed block recorded by the sidecar.
    async fn last_committed_block(&self) -> Result<Option<u64>>;
    /// Records the last fully committed block (never moves backwards).
    async fn set_last_committed_block(&self, block: u64) -> Result<()>;
    /// Every namespace that has a `_meta` row, plus `_meta` itself.
    async fn namespaces(&self) -> Result<Vec<String>>;
    /// Every row of a namespace, ordered by key.
    async fn scan(&self, ns: &str) -> Result<Vec<Row>>;
}
