//! The batcher's configuration, validated once by [`Config::validate`].

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};

use crypto::PublicKey;
use types::{PartyId, ShardId};

use crate::{Error, Result};

/// Everything the core needs to know about its network and its bounds.
#[derive(Debug, Clone)]
pub struct Config {
    /// This batcher's party (one of `parties`).
    pub party: PartyId,
    /// This batcher's shard (`0..shards`).
    pub shard: ShardId,
    /// The parties in force (one batcher of this shard per party; a party that left
    /// leaves a gap in the ids).
    pub parties: arma::Parties,
    /// Number of shards S (requests map to shards with `arma::content::shard_of`).
    pub shards: u32,
    /// The batcher public key of every party, for this shard: checks batch headers and BAFs.
    pub keys: BTreeMap<PartyId, PublicKey>,
    /// Largest request accepted, in bytes (the router checks it first; the core checks
    /// again, and a secondary checks every request of a pulled batch).
    pub max_request_bytes: NonZeroUsize,
    /// Most requests in one batch.
    pub max_batch_requests: NonZeroU32,
    /// Most request bytes in one batch (at least `max_request_bytes`).
    pub max_batch_bytes: NonZeroU64,
    /// A primary cuts a non-full batch once its oldest pending request waited this long.
    pub batch_timeout_ms: u64,
    /// Most batches a primary has cut but not yet seen confirmed (f+1 acks, its own included).
    pub window: NonZeroU32,
    /// Most batches this batcher holds persisted but not yet ordered (at least `window`):
    /// a primary stops cutting and a secondary stops pulling at this bound.
    pub max_unordered_batches: NonZeroU32,
    /// Most requests held: pending ones plus those in unordered batches.
    pub mempool_max_requests: NonZeroUsize,
    /// Most request bytes held, counted like `mempool_max_requests` (at least
    /// `max_request_bytes`).
    pub mempool_max_bytes: NonZeroU64,
    /// How many ordered request digests are remembered to refuse resubmissions.
    pub ordered_memory: NonZeroUsize,
    /// A secondary forwards a request to the primary once it waited this long in the term.
    pub forward_timeout_ms: u64,
    /// A secondary complains once a request waited this long in the term (at least
    /// `forward_timeout_ms`).
    pub complain_timeout_ms: u64,
}

impl Config {
    /// Checks ranges, keys and the relations between limits.
    pub fn validate(&self) -> Result<()> {
        if self.shards == 0 {
            return Err(Error::NoShards);
        }
        if !self.parties.contains(self.party) {
            return Err(Error::PartyOutOfRange {
                party: self.party,
                parties: self.parties.clone(),
            });
        }
        if self.shard >= self.shards {
            return Err(Error::ShardOutOfRange {
                shard: self.shard,
                shards: self.shards,
            });
        }
        for &party in self.parties.ids() {
            if !self.keys.contains_key(&party) {
                return Err(Error::MissingKey { party });
            }
        }
        if let Some(&party) = self.keys.keys().find(|p| !self.parties.contains(**p)) {
            return Err(Error::UnknownKeyParty {
                party,
                parties: self.parties.clone(),
            });
        }
        self.validate_limits()
    }

    fn validate_limits(&self) -> Result<()> {
        let request = self.max_request_bytes.get() as u64;
        let pairs = [
            (
                "max_batch_bytes",
                self.max_batch_bytes.get(),
                "max_request_bytes",
                request,
            ),
            (
                "mempool_max_bytes",
                self.mempool_max_bytes.get(),
                "max_request_bytes",
                request,
            ),
            (
                "max_unordered_batches",
                u64::from(self.max_unordered_batches.get()),
                "window",
                u64::from(self.window.get()),
            ),
            (
                "complain_timeout_ms",
                self.complain_timeout_ms,
                "forward_timeout_ms",
                self.forward_timeout_ms,
            ),
        ];
        for (field, value, other, minimum) in pairs {
            if value < minimum {
                return Err(Error::LimitTooSmall {
                    field,
                    value,
                    other,
                    minimum,
                });
            }
        }
        Ok(())
    }

    /// This shard's primary in `term`: the `((shard + term) mod N)`-th party in force
    /// (docs/contracts.md).
    pub fn primary_of(&self, term: u64) -> PartyId {
        primary_of(self.shard, term, &self.parties)
    }
}

pub use arma::primary_of;
