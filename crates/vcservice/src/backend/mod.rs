//! State backends: one trait, two implementations (PostgreSQL, embedded RocksDB), one
//! conformance suite (`tests/conformance.rs`).

pub mod embedded;
pub mod postgres;

use crate::Result;
use crate::model::{CommitResult, CommitSet, OwnedPage, ReadSet, Row, Snapshot, StatusMap, VersionMap};
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
    /// upsert blind writes. The owner index ([`Backend::owned_rows`]) changes in the same
    /// atomic write as the rows.
    async fn commit(&self, set: &CommitSet) -> Result<CommitResult>;
    /// The last fully committed block recorded by the sidecar.
    async fn last_committed_block(&self) -> Result<Option<u64>>;
    /// Records the last fully committed block (never moves backwards).
    async fn set_last_committed_block(&self, block: u64) -> Result<()>;
    /// Every namespace that has a `_meta` row, plus `_meta` itself.
    async fn namespaces(&self) -> Result<Vec<String>>;
    /// Every row of a namespace, ordered by key.
    async fn scan(&self, ns: &str) -> Result<Vec<Row>>;
    /// Committed rows of `keys` in namespace `ns` (absent keys, and every key of a
    /// namespace that does not exist, are left out), in key order, all read at one
    /// snapshot together with the last committed block. Rows are taken in key order until
    /// the next one would bring the keys' and values' bytes over `max_bytes`; then the
    /// answer is cut and `more` is set (the first row is always taken, so a reader asking
    /// again for the keys after the last row always progresses).
    async fn read_rows(&self, ns: &str, keys: &[Vec<u8>], max_bytes: usize) -> Result<Snapshot>;
    /// Committed rows of `ns` whose value is owned by `owner` (`types::owned::owner_of`),
    /// in key order, keys after `page.after_key`, at most `page.limit` rows and
    /// `page.max_bytes` bytes as [`Backend::read_rows`] (`more` set when cut), read at one
    /// snapshot from the owner index the commits keep. An owner that is not
    /// `types::owned::OWNER_LEN` bytes owns nothing.
    async fn owned_rows(&self, ns: &str, owner: &[u8], page: &OwnedPage) -> Result<Snapshot>;
}
