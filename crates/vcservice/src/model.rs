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
