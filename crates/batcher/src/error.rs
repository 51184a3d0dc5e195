//! The crate's error type: invalid configurations, the reasons a pulled batch is
//! rejected (each of the latter is also the evidence behind a complaint), malformed wire
//! messages (`codec`) and the node's failures (`node`, feature `shell`).

use types::{BatchId, PartyId, ShardId};

/// Errors of the batcher core.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The network has no parties.
    #[error("the network needs at least one party")]
    NoParties,
    /// The network has no shards.
    #[error("the network needs at least one shard")]
    NoShards,
    /// This batcher's party is not one of the parties in force (never was, or left).
    #[error("party {party} is not in force (parties {parties:?})")]
    PartyOutOfRange {
        /// The configured party.
        party: PartyId,
        /// The parties in force.
        parties: arma::Parties,
    },
    /// This batcher's shard is not one of `0..shards`.
    #[error("shard {shard} is not in 0..{shards}")]
    ShardOutOfRange {
        /// The configured shard.
        shard: ShardId,
        /// Number of shards.
        shards: u32,
    },
    /// A party of the network has no batcher public key.
    #[error("no batcher public key for party {party}")]
    MissingKey {
        /// The party without a key.
        party: PartyId,
    },
    /// A public key is given for a party not in force.
    #[error("a batcher public key is given for party {party}, not in force (parties {parties:?})")]
    UnknownKeyParty {
        /// The party named by the key.
        party: PartyId,
        /// The parties in force.
        parties: arma::Parties,
    },
    /// A key set that names no party, or a party id 0.
    #[error("a key set does not name parties in force: {reason}")]
    BadKeySet {
        /// Why.
        reason: String,
    },
    /// The signing key does not match the party's configured public key.
    #[error("the signing key does not match party {party}'s public key")]
    SigningKeyMismatch {
        /// This batcher's party.
        party: PartyId,
    },
    /// Two limits contradict each other.
    #[error("config: {field} = {value} must be at least {other} = {minimum}")]
    LimitTooSmall {
        /// The field that is too small.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The field it is compared with.
        other: &'static str,
        /// The minimum it must reach.
        minimum: u64,
    },

    /// A batch names another shard.
    #[error("batch {id} is not for shard {expected}")]
    BatchOfAnotherShard {
        /// The batch's id.
        id: BatchId,
        /// This batcher's shard.
        expected: ShardId,
    },
    /// A party served a batch that names another primary.
    #[error("batch {id} was served by party {from}, not by its primary")]
    NotFromItsPrimary {
        /// The batch's id.
        id: BatchId,
        /// The party that served it.
        from: PartyId,
    },
    /// A request of a pulled batch fails the content checks every role makes
    /// (`arma::admission`: envelope structure, client signatures).
    #[error("request {index} of batch {id} is refused: {reason}")]
    RefusedRequest {
        /// The batch's id.
        id: BatchId,
        /// The request's index in the batch.
        index: usize,
        /// Why.
        reason: String,
    },
    /// A request of a pulled batch was ordered already, or is in another unordered batch
    /// of the term (a correct primary batches a request once).
    #[error("request {index} of batch {id} is ordered or batched already")]
    RequestNotNew {
        /// The batch's id.
        id: BatchId,
        /// The request's index in the batch.
        index: usize,
    },
    /// A batch holds no request (a primary never cuts an empty batch).
    #[error("batch {id} is empty")]
    EmptyBatch {
        /// The batch's id.
        id: BatchId,
    },
    /// A batch holds more requests than a batch may.
    #[error("batch {id} holds {count} requests, more than {max}")]
    TooManyRequests {
        /// The batch's id.
        id: BatchId,
        /// Requests in it.
        count: usize,
        /// The limit.
        max: u32,
    },
    /// A batch's requests add up to more bytes than a batch may.
    #[error("batch {id} holds {bytes} bytes of requests, more than {max}")]
    BatchTooLarge {
        /// The batch's id.
        id: BatchId,
        /// Its request bytes.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// The header's tx count is not the number of requests.
    #[error("batch {id} claims {claimed} requests but holds {count}")]
    TxCountMismatch {
        /// The batch's id.
        id: BatchId,
        /// The header's count.
        claimed: u32,
        /// Requests in it.
        count: usize,
    },
    /// The header's digest is not the batch digest of the requests.
    #[error("batch {id}: the header digest is not the digest of its requests")]
    DigestMismatch {
        /// The batch's id.
        id: BatchId,
    },
    /// The primary's signature over the header does not verify.
    #[error("batch {id}: the primary's signature does not verify")]
    BadBatchSignature {
        /// The batch's id.
        id: BatchId,
    },
    /// A request of the batch belongs to another shard.
    #[error("batch {id}: request {index} belongs to shard {shard}")]
    RequestOfAnotherShard {
        /// The batch's id.
        id: BatchId,
        /// The request's index in the batch.
        index: usize,
        /// The shard it maps to.
        shard: ShardId,
    },
    /// A request of the batch is larger than a request may be.
    #[error("batch {id}: request {index} has {bytes} bytes, more than {max}")]
    RequestTooLarge {
        /// The batch's id.
        id: BatchId,
        /// The request's index in the batch.
        index: usize,
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A request appears twice in the batch.
    #[error("batch {id}: request {index} repeats an earlier request of the batch")]
    DuplicateRequestInBatch {
        /// The batch's id.
        id: BatchId,
        /// The index of the repetition.
        index: usize,
    },

    /// A served decision failed verification (certificate, headers or term changes).
    #[error("decision {decision} refused: {reason}")]
    DecisionRefused {
        /// The decision number.
        decision: u64,
        /// Why.
        reason: String,
    },
    /// A wire message field has the wrong shape (`arma`'s conversions).
    #[error(transparent)]
    Codec(#[from] arma::CodecError),
    /// A required wire message field is absent.
    #[error("{message}.{field} is required")]
    MissingField {
        /// The message type.
        message: &'static str,
        /// The field.
        field: &'static str,
    },
    /// Bytes that do not decode as the expected protobuf message.
    #[error("not a {message}: {reason}")]
    Undecodable {
        /// The expected message type.
        message: &'static str,
        /// The decoder's reason.
        reason: String,
    },

    /// The node's configuration is inconsistent.
    #[error("node config: {reason}")]
    NodeConfig {
        /// What is wrong.
        reason: String,
    },
    /// The node's metrics could not be made.
    #[error("batcher metrics: {0}")]
    Metrics(String),
    /// The node could not listen on its address.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        reason: String,
    },
    /// The batch store or the progress log failed (the node stops: it must never attest
    /// a batch it did not persist).
    #[error("storage {what}: {reason}")]
    Storage {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// A config in force removed this batcher's party: the node stopped, as it should
    /// (docs/reconfiguration.md "Removing a party").
    #[error("party {party} left the network (a config update removed it): this batcher stopped")]
    PartyLeft {
        /// The party.
        party: PartyId,
    },
    /// The node's loop stopped (a task it depends on ended).
    #[error("the batcher node stopped: {reason}")]
    Stopped {
        /// Why.
        reason: String,
    },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, Error>;
