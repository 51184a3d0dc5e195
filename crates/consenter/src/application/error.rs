//! Errors of the Arma application.

use types::{PartyId, ShardId};

/// Why an Arma request was refused, or a config is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArmaError {
    /// The request is not a `ConsenterRequest` with a BAF or a complaint.
    #[error("the request does not decode: {what}")]
    Decode {
        /// What is missing or malformed.
        what: &'static str,
    },
    /// The request names a shard the network does not have.
    #[error("shard {shard} does not exist ({shards} shards)")]
    UnknownShard {
        /// The shard named.
        shard: ShardId,
        /// Shards of the network.
        shards: u32,
    },
    /// The request names a party not in force (never one, or one that left).
    #[error("party {party} is not in force (parties {parties:?})")]
    UnknownParty {
        /// The party named.
        party: PartyId,
        /// The parties in force.
        parties: arma::Parties,
    },
    /// A signature does not verify under the network's batcher key.
    #[error("bad {which} signature of party {party} (shard {shard})")]
    BadSignature {
        /// Whose: "BAF", "primary" or "complaint".
        which: &'static str,
        /// The party whose key was used.
        party: PartyId,
        /// The shard.
        shard: ShardId,
    },
    /// A BAF or complaint signed under another network config than the one in force
    /// (an older one: its signer had not followed the last update yet, or a message
    /// captured before it; a newer one: this consenter is behind).
    #[error("{which} claiming party {party} names config sequence {got}, the network is at {current}")]
    StaleConfig {
        /// "BAF" or "complaint".
        which: &'static str,
        /// The signer it claims (not verified: the sequence is checked first).
        party: PartyId,
        /// The sequence it names.
        got: u64,
        /// The sequence in force.
        current: u64,
    },
    /// A config update the config rules refuse (or a network without rules).
    #[error("config update refused: {reason}")]
    ConfigUpdate {
        /// Why.
        reason: String,
    },
    /// The application's configuration is invalid.
    #[error("bad Arma configuration: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },
}

/// Results of the Arma application.
pub type ArmaResult<T> = std::result::Result<T, ArmaError>;
