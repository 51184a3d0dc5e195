//! What flows into and out of the validator-committer.

use std::collections::{BTreeMap, HashMap};

use types::{Height, Status, TxId};
pub use types::{TxOutcome, VcTx};

/// Keys whose committed versions a batch needs: namespace → keys.
pub type ReadSet = BTreeMap<String, Vec<Vec<u8>>>;

/// Committed versions found for a [`ReadSet`]: absent keys are not in the map.
pub type VersionMap = HashMap<(String, Vec<u8>), u64>;

/// Stored statuses by tx id.
pub type StatusMap = HashMap<TxId, (Status, Height)>;

/// Writes of one namespace in one commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NsWrites {
    /// New keys (read-writes of absent keys): inserted at version 0; a key that exists by
    /// now is a conflict.
    pub inserts: Vec<(Vec<u8>, Vec<u8>)>,
    /// Updates of keys read at `version`: written at `version + 1` only if still at `version`.
    pub updates: Vec<(Vec<u8>, Vec<u8>, u64)>,
    /// Blind writes: inserted at version 0, or an existing key's version + 1.
    pub upserts: Vec<(Vec<u8>, Vec<u8>)>,
}

impl NsWrites {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.inserts.is_empty() && self.updates.is_empty() && self.upserts.is_empty()
    }
}

/// Everything one batch commits, atomically.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitSet {
    /// Status rows to store; a row that exists by now is a conflict.
    pub statuses: Vec<TxOutcome>,
    /// Namespaces created by this commit (their `_meta` row is inserted here too).
    pub new_namespaces: Vec<String>,
    /// Writes per namespace.
    pub writes: BTreeMap<String, NsWrites>,
}

impl CommitSet {
    /// Whether the commit would change nothing.
    pub fn is_empty(&self) -> bool {
        self.statuses.is_empty() && self.writes.values().all(NsWrites::is_empty)
    }
}

/// What a backend reports after trying to commit a [`CommitSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitResult {
    /// Everything was written.
    Applied,
    /// A condition failed (a status row, inserted key or updated version changed since it
    /// was read); nothing was written. The batch is planned again from fresh reads.
    Conflict,
}

/// One row of a namespace, for state dumps.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    /// Key.
    pub key: Vec<u8>,
    /// Value.
    pub value: Vec<u8>,
    /// Version.
    pub version: u64,
}

/// Rows read from committed state at one snapshot ([`crate::Backend::read_rows`],
/// [`crate::Backend::owned_rows`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Rows found, in key order, each key once.
    pub rows: Vec<Row>,
    /// Whether the answer was cut (at its row limit or its byte budget) and more rows
    /// follow the last one.
    pub more: bool,
    /// The last fully committed block recorded when the snapshot was taken (none before
    /// the first).
    pub last_committed_block: Option<u64>,
}

/// Which part of an owner's rows to read ([`crate::Backend::owned_rows`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedPage {
    /// Only keys strictly after this one (empty: from the first key; keys are never empty).
    pub after_key: Vec<u8>,
    /// Most rows.
    pub limit: usize,
    /// Byte budget of keys and values (see [`crate::Backend::read_rows`]).
    pub max_bytes: usize,
}

/// Bytes of a row counted against a [`ReadBudget`].
pub fn row_cost(key: &[u8], value: &[u8]) -> usize {
    key.len().saturating_add(value.len())
}

/// Collects rows in key order within a row limit and a byte budget (the rule of
/// [`crate::Backend::read_rows`]): the first row always fits the budget.
#[derive(Debug)]
pub(crate) struct PageCollector {
    rows: Vec<Row>,
    bytes: usize,
    limit: usize,
    max_bytes: usize,
}

impl PageCollector {
    /// An empty page of at most `limit` rows and `max_bytes` bytes.
    pub(crate) fn new(limit: usize, max_bytes: usize) -> PageCollector {
        PageCollector {
            rows: Vec::new(),
            bytes: 0,
            limit,
            max_bytes,
        }
    }

    /// Whether a row of `cost` bytes still fits; when it does not, the page is cut there.
    pub(crate) fn fits(&self, cost: usize) -> bool {
        self.rows.len() < self.limit
            && (self.rows.is_empty() || self.bytes.saturating_add(cost) <= self.max_bytes)
    }

    /// Adds a row (after [`PageCollector::fits`]).
    pub(crate) fn push(&mut self, row: Row) {
        self.bytes = self.bytes.saturating_add(row_cost(&row.key, &row.value));
        self.rows.push(row);
    }

    /// The rows taken.
    pub(crate) fn into_rows(self) -> Vec<Row> {
        self.rows
    }
}
