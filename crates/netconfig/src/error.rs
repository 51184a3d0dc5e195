//! The crate's error type: every way a network config file, a key file or a generation
//! request can be wrong, each naming the node or field at fault.

use std::fmt;
use std::path::PathBuf;
use types::{PartyId, ShardId};

/// One node of the network, for errors and key files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Node {
    /// Party `p`'s router.
    Router(PartyId),
    /// Party `p`'s consenter.
    Consenter(PartyId),
    /// Party `p`'s assembler.
    Assembler(PartyId),
    /// Party `party`'s batcher of shard `shard`.
    Batcher {
        /// The party.
        party: PartyId,
        /// The shard.
        shard: ShardId,
    },
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Router(p) => write!(f, "party {p} router"),
            Node::Consenter(p) => write!(f, "party {p} consenter"),
            Node::Assembler(p) => write!(f, "party {p} assembler"),
            Node::Batcher { party, shard } => write!(f, "party {party} batcher of shard {shard}"),
        }
    }
}

/// Errors of the network configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("reading {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        reason: String,
    },
    /// A file or directory could not be written.
    #[error("writing {path}: {reason}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        reason: String,
    },
    /// Generation refuses to overwrite an existing network config.
    #[error("{path} already exists: a network is already generated there")]
    Exists {
        /// The existing file.
        path: PathBuf,
    },
    /// The file is not JSON of the expected shape (unknown or missing fields, wrong types).
    #[error("parsing the network config: {reason}")]
    Parse {
        /// serde's reason, with line and column.
        reason: String,
    },
    /// The file's format version is not one this build reads.
    #[error("network config version {version} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// The file's version.
        version: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The chain name is empty or not printable ASCII without spaces.
    #[error("chain name {chain:?} must be 1..=64 printable ASCII characters without spaces")]
    BadChain {
        /// The name.
        chain: String,
    },
    /// The network has no parties.
    #[error("the network has no parties (N must be at least 1)")]
    NoParties,
    /// The `tls` section or the TLS material is wrong.
    #[error("tls: {reason}")]
    Tls {
        /// What is wrong.
        reason: String,
    },
    /// The `token` section is wrong or missing.
    #[error("token: {reason}")]
    Token {
        /// What is wrong.
        reason: String,
    },
    /// The `committer` section is wrong or missing.
    #[error("committer: {reason}")]
    Committer {
        /// What is wrong.
        reason: String,
    },
    /// The network has no shards.
    #[error("the network has no shards (S must be at least 1)")]
    NoShards,
    /// A party or shard the network does not have.
    #[error("{what} is not in {range}: the network has no such node")]
    NotInNetwork {
        /// What was asked for (`party 9`, `shard 2`).
        what: String,
        /// What the network has (`1..=4`).
        range: String,
    },
    /// Parties must be listed in order with ids 1..N.
    #[error(
        "the party at position {index} has id {id}; party ids start at 1 and increase down the list (the id before it is {after})"
    )]
    PartyOrder {
        /// Position in the list (0-based).
        index: usize,
        /// Its id.
        id: PartyId,
        /// The id before it (0 for the first).
        after: PartyId,
    },
    /// A party in force has an id listed in `left_parties`.
    #[error(
        "party {id} is listed among the parties and in left_parties: an id that left is never given again"
    )]
    PartyLeft {
        /// The id.
        id: PartyId,
    },
    /// An id below the highest used is neither a party nor listed in `left_parties`, or
    /// `left_parties` is not increasing, or names id 0.
    #[error("party ids: {reason}")]
    PartyIds {
        /// What is wrong.
        reason: String,
    },
    /// A party does not list one batcher per shard, in shard order.
    #[error(
        "party {party}: {}; expected one batcher per shard 0..{shards}, in order",
        match shard {
            Some(shard) => format!("the batcher at position {index} is for shard {shard}"),
            None => format!("no batcher at position {index}"),
        }
    )]
    BatcherShards {
        /// The party.
        party: PartyId,
        /// Position in its list (0-based; `shards` when one is missing at the end).
        index: usize,
        /// The shard found there (`None` when the list is too short).
        shard: Option<ShardId>,
        /// Number of shards.
        shards: u32,
    },
    /// An endpoint is not `host:port` with a non-zero port.
    #[error("{node}: endpoint {endpoint:?} {reason}")]
    BadEndpoint {
        /// The node.
        node: Node,
        /// The endpoint.
        endpoint: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Two nodes share an endpoint.
    #[error("{first} and {second} share the endpoint {endpoint}")]
    DuplicateEndpoint {
        /// The endpoint.
        endpoint: String,
        /// The first node with it.
        first: Node,
        /// The second.
        second: Node,
    },
    /// A public key does not decode (`scheme:hex`).
    #[error("{node}: public key {key:?}: {reason}")]
    BadKey {
        /// The node.
        node: Node,
        /// The key text (public).
        key: String,
        /// Why it does not decode.
        reason: String,
    },
    /// A party's admin key does not decode (`scheme:hex`).
    #[error("party {party} admin_key {key:?}: {reason}")]
    BadAdminKey {
        /// The party.
        party: PartyId,
        /// The key text (public).
        key: String,
        /// Why it does not decode.
        reason: String,
    },
    /// A party's admin key is another party's admin key or a node's key.
    #[error("party {party} admin_key is also the key of {other}: every key of the network must be distinct")]
    DuplicateAdminKey {
        /// The party.
        party: PartyId,
        /// Who else holds it (`party 2 admin`, `party 1 consenter`).
        other: String,
    },
    /// `update_policy.signatures` is not in 1..=N.
    #[error("update_policy.signatures = {signatures} must be in 1..={parties} (the number of parties)")]
    UpdatePolicy {
        /// The value.
        signatures: u32,
        /// N.
        parties: u32,
    },
    /// The party has no admin key in the network config.
    #[error("party {party} has no admin key in the network config")]
    NoAdminKey {
        /// The party.
        party: PartyId,
    },
    /// A key file holds another key than the admin key the config lists for the party.
    #[error("the key file {path} does not hold party {party}'s admin key ({expected})")]
    AdminKeyMismatch {
        /// The party.
        party: PartyId,
        /// The key file.
        path: PathBuf,
        /// The admin key the config lists.
        expected: String,
    },
    /// A node or an admin is given a key the network retired.
    #[error(
        "{holder} has the key {key}, which the network retired (`retired_keys`): a retired key is never named again"
    )]
    RetiredKeyInUse {
        /// Who has it.
        holder: String,
        /// The key.
        key: String,
    },
    /// A `retired_keys` entry that is not a public key.
    #[error("retired_keys: {key:?} is not a public key (`<scheme>:<hex>`)")]
    BadRetiredKey {
        /// The entry.
        key: String,
    },
    /// Two nodes share a public key.
    #[error("{first} and {second} have the same public key")]
    DuplicateKey {
        /// The first node with it.
        first: Node,
        /// The second.
        second: Node,
    },
    /// A parameter is out of its range.
    #[error("{field} = {value}: {problem}")]
    OutOfRange {
        /// The field (`section.name`).
        field: &'static str,
        /// Its value.
        value: u64,
        /// The range it must be in.
        problem: &'static str,
    },
    /// A parameter is below the one it is bounded by.
    #[error("{field} = {value} must be at least {other} = {minimum}")]
    TooSmall {
        /// The field (`section.name`).
        field: &'static str,
        /// Its value.
        value: u64,
        /// The field that bounds it.
        other: &'static str,
        /// That field's value.
        minimum: u64,
    },
    /// A client of `router.client_auth` is malformed or listed twice.
    #[error("router.client_auth client {index}: {reason}")]
    BadClient {
        /// Position in the list (0-based).
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A party not in force was asked for.
    #[error("party {party} is not a party of the network (parties {parties:?})")]
    UnknownParty {
        /// The party.
        party: PartyId,
        /// The parties in force.
        parties: Vec<PartyId>,
    },
    /// A shard outside 0..S was asked for.
    #[error("shard {shard} is not in 0..{shards}")]
    UnknownShard {
        /// The shard.
        shard: ShardId,
        /// Number of shards.
        shards: u32,
    },
    /// A key file could not be read or is not a key file.
    #[error("{node}: key file: {reason}")]
    KeyFile {
        /// The node whose key it should be.
        node: Node,
        /// Why it was refused.
        reason: String,
    },
    /// A key file holds a key other than the one the network config lists for its node.
    #[error("{node}: the key file {path} does not hold the public key the network config lists ({expected})")]
    KeyMismatch {
        /// The node.
        node: Node,
        /// The key file.
        path: PathBuf,
        /// The public key the config lists.
        expected: String,
    },
    /// The node has no key in the network config (routers and assemblers sign nothing).
    #[error("{node} has no key in the network config")]
    NoKey {
        /// The node.
        node: Node,
    },
    /// The router config built from the file is refused by the router.
    #[error("party {party}: router config: {source}")]
    Router {
        /// The party.
        party: PartyId,
        /// The router's reason.
        source: router::Error,
    },
    /// The batcher config built from the file is refused by the batcher.
    #[error("party {party} shard {shard}: batcher config: {source}")]
    Batcher {
        /// The party.
        party: PartyId,
        /// The shard.
        shard: ShardId,
        /// The batcher's reason.
        source: batcher::Error,
    },
    /// A joining party's node cannot start from its genesis and joining configs.
    #[error("joining party {party}: {reason}")]
    Join {
        /// The joining party.
        party: u32,
        /// Why not.
        reason: String,
    },
    /// The Arma consenter application refuses the config built from the file.
    #[error("consenter config: {reason}")]
    Consenter {
        /// The consenter's reason.
        reason: String,
    },
    /// The node is not listed in the network config (an assembler without an endpoint).
    #[error("{node} has no endpoint in the network config")]
    NoEndpoint {
        /// The node.
        node: Node,
    },
    /// The `fabric` section is inconsistent.
    #[error("fabric: {reason}")]
    Fabric {
        /// What is wrong.
        reason: String,
    },
    /// A generation request is out of range (ports, counts).
    #[error("generate: {reason}")]
    Generate {
        /// What is wrong.
        reason: String,
    },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, Error>;
