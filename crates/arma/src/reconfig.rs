//! The seam through which the consenters order network config updates (ADR 0018,
//! docs/reconfiguration.md).
//!
//! A config update is an ordered request like a BAF. Whether it may replace the config
//! in force, and what a config says about the ordering (parties, shards, batcher keys,
//! consenter keys), is decided by the network config's own rules, which live in a
//! composition crate the roles may not depend on. The roles take those rules through
//! [`ConfigRules`]: pure functions of bytes, so every consenter that checks one update
//! against one config in force reaches the same verdict and the same next config.

use std::collections::BTreeMap;
use std::fmt;

use bft::ReplicaId;
use crypto::PublicKey;
use types::{PartyId, ShardId};

use crate::parties::Parties;

/// A network's config rules, as the ordering sees them. Every method is a pure function
/// of its arguments (no clock, no file): the consenters' state machine calls them while
/// it executes a decision.
pub trait ConfigRules: Send + Sync + fmt::Debug {
    /// Checks `update` against the config in force (`current`, canonical bytes): it
    /// replaces exactly that config, carries a valid next config and enough admin
    /// signatures. Gives the next config's canonical bytes, or why it is refused.
    fn next(&self, current: &[u8], update: &[u8]) -> Result<Vec<u8>, String>;

    /// The next config `update` carries, without checking it against a config in force:
    /// for an update in a decision a quorum of the set before it certified (a replica
    /// that catches up across the switch reads the next set from it).
    fn carried(&self, update: &[u8]) -> Result<Vec<u8>, String>;

    /// What the ordering reads of a config (canonical bytes).
    fn view(&self, config: &[u8]) -> Result<ConfigView, String>;

    /// `config` (canonical bytes, already read by [`ConfigRules::view`]) is in force for
    /// this process from now on: a switch it followed, or the newest config it restored.
    /// What the ordering does not read of a config (the TLS section, ADR 0019) is applied
    /// here; an older config handed over after a newer one must change nothing.
    fn in_force(&self, _config: &[u8]) {}
}

/// What the ordering reads of a network config.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigView {
    /// The config's sequence (0 for the genesis config; one more per update).
    pub sequence: u64,
    /// The parties in force (ids increasing; a party that left leaves a gap).
    pub parties: Parties,
    /// The parties that left through earlier updates, increasing: their nodes take no
    /// part from the decision that removed them on, and stop themselves.
    pub left_parties: Vec<PartyId>,
    /// Number of shards S (shards are `0..S`).
    pub shards: u32,
    /// The batcher public key of every `(party, shard)`.
    pub batcher_keys: BTreeMap<(PartyId, ShardId), PublicKey>,
    /// The consenters' signing keys by replica id (party `p` runs replica `p − 1`): one
    /// for each party in force.
    pub consenters: BTreeMap<ReplicaId, PublicKey>,
    /// The consenters' `host:port` endpoints by replica id, where their peers dial them
    /// (empty: the config does not say; a replica set then never grows its links).
    pub consenter_endpoints: BTreeMap<ReplicaId, String>,
    /// The `host:port` endpoint of every `(party, shard)`'s batcher (empty: the config
    /// does not say; the batchers' links then never grow).
    pub batcher_endpoints: BTreeMap<(PartyId, ShardId), String>,
    /// How far past a shard's last ordered seq the consenters count BAFs: every
    /// consenter must use the same value, so it is read from the config in force.
    pub max_seqs_ahead: u64,
    /// The batchers' parameters that follow the config in force.
    pub batching: BatchingView,
    /// The consensus engine's limits and timing (`None`: the config does not set them;
    /// the engine keeps those it has).
    pub engine: Option<bft::EngineParams>,
}

/// The batching parameters a batcher applies from the decision that puts a config in
/// force (the others — request size, window, mempool bounds — are read at start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchingView {
    /// Most requests in one batch.
    pub max_batch_requests: u32,
    /// Most request bytes in one batch.
    pub max_batch_bytes: u64,
    /// A primary cuts a non-full batch after this long.
    pub batch_timeout_ms: u64,
    /// A secondary forwards a request pending this long to the primary.
    pub forward_timeout_ms: u64,
    /// A secondary complains about a primary when a request waits this long.
    pub complain_timeout_ms: u64,
}

impl ConfigView {
    /// The consenters' keys as a set ([`crate::ClusterKeys::by_id`] on the default chain: a
    /// verifier's keys; sets after the genesis one sign under `bft::set_chain`).
    pub fn consenter_keys(&self) -> crate::ClusterKeys {
        crate::ClusterKeys::by_id(crate::DEFAULT_CHAIN, self.consenters.clone())
    }

    /// Whether `party` left the network (a party not yet joined has not).
    pub fn has_left(&self, party: PartyId) -> bool {
        self.left_parties.binary_search(&party).is_ok()
    }

    /// The consenters' replica set: the ids that hold a key (refused when none does).
    pub fn replicas(&self) -> Result<bft::Members, bft::MembersError> {
        bft::Members::new(self.consenters.keys().copied().collect())
    }
}

impl fmt::Debug for ConfigView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigView")
            .field("sequence", &self.sequence)
            .field("parties", &self.parties)
            .field("shards", &self.shards)
            .field("consenters", &self.consenters.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}
