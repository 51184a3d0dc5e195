//! The JSON form of the network config file (`docs/network-config.md`), exactly as it is
//! written and read. Nothing here is validated: [`crate::NetworkConfig::from_file`] does
//! that. Unknown fields are refused (a misspelt parameter is an error, not a default).

use serde::{Deserialize, Serialize};
use types::{PartyId, ShardId};

/// The format version this build writes and reads.
pub const VERSION: u32 = 1;

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkFile {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// The chain name: bound with the consenter keys into every consenter signature.
    pub chain: String,
    /// The config's sequence: 0 for the network as generated, one more with each config
    /// update applied (docs/reconfiguration.md). Absent in older files: 0.
    #[serde(default)]
    pub sequence: u64,
    /// Number of shards S (shards are 0..S−1).
    pub shards: u32,
    /// The parties in force, ids increasing (1..N for a network none has left; a party
    /// that left leaves a gap, listed in `left_parties`).
    pub parties: Vec<PartyFile>,
    /// Batching parameters (every batcher of the network).
    #[serde(default)]
    pub batching: BatchingParams,
    /// Consensus parameters (every consenter of the network).
    #[serde(default)]
    pub consensus: ConsensusParams,
    /// Router parameters (every router of the network).
    #[serde(default)]
    pub router: RouterParams,
    /// The committing side: the `_meta` policy and each committing party's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committer: Option<CommitterFile>,
    /// Mutual TLS on every link (absent: plain TCP, for experiments only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFile>,
    /// The token application: its namespace, threshold key set, endorsers, issuers and
    /// query services (docs/token.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TokenFile>,
    /// The Fabric edges: each party's organization and the Fabric clients (docs/fabric.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<FabricFile>,
    /// How many parties' admins must sign a config update (absent: a majority of the
    /// parties, ⌊N/2⌋ + 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_policy: Option<UpdatePolicyFile>,
    /// Public keys (consenter, batcher, admin) that an earlier config of the network named
    /// and a config update replaced: none of them may be named again (docs/reconfiguration.md
    /// "When an update is valid"). `fabrx network update propose` fills it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired_keys: Vec<String>,
    /// The ids of the parties that left through config updates, increasing: never given
    /// again (a party that joins takes the id after every id used). Every id from 1 to
    /// the highest used is a party's or listed here (docs/reconfiguration.md "Removing a
    /// party").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_parties: Vec<PartyId>,
}

/// `update_policy`: who must sign a config update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdatePolicyFile {
    /// Distinct parties whose admins must sign (K, 1 ≤ K ≤ N).
    pub signatures: u32,
}

/// `fabric`: what a Fabric client is given and what the genesis block says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricFile {
    /// The channel id of the genesis block (`arma`).
    pub channel: String,
    /// One organization per party.
    pub orgs: Vec<FabricOrgFile>,
    /// The Fabric clients whose signed envelopes the network orders when
    /// `router.client_auth` is `signed`.
    #[serde(default)]
    pub clients: Vec<FabricClientFile>,
}

/// One party's organization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricOrgFile {
    /// The party.
    pub party: PartyId,
    /// Its MSP id (`party<P>`).
    pub msp_id: String,
    /// Its identity CA certificate (PEM).
    pub ca: String,
}

/// One Fabric client: its MSP and certificate (PEM, as its envelopes name it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricClientFile {
    /// Its organization's MSP id.
    pub msp_id: String,
    /// Its x509 certificate (PEM, ECDSA P-256).
    pub certificate: String,
}

/// `router.request_format`: which envelopes the network orders (docs/fabric.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestFormatFile {
    /// fabrx envelopes only (`fabrx.v1.Router`).
    Fabrx,
    /// Fabric envelopes only (`orderer.AtomicBroadcast`).
    Fabric,
    /// Both (a request with a fabrx tx id is a fabrx envelope).
    #[default]
    Both,
}

impl NetworkFile {
    /// The pretty JSON text of the file, ending with a newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// `token`: the token application of the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFile {
    /// The token namespace (created by `fabrx up` with the group key as its policy).
    pub namespace: String,
    /// The namespace's policy version the endorsers sign for (0 when created).
    #[serde(default)]
    pub ns_version: u64,
    /// Partial signatures needed (t of the endorsers' n).
    pub threshold: u32,
    /// The group public key (`bls12-381:hex`): the namespace's policy.
    pub group_key: String,
    /// The endorsers, one per share, in share order (share i+1 at index i).
    pub endorsers: Vec<EndorserFile>,
    /// Keys that may issue tokens (Ed25519 public keys, hex).
    pub issuers: Vec<String>,
    /// The committing parties' query services.
    pub query: Vec<QueryFile>,
}

/// One endorser: the party that runs it, where it listens, its share's public key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndorserFile {
    /// Its share index (1..n).
    pub index: u32,
    /// The party that runs it.
    pub party: PartyId,
    /// `host:port`.
    pub endpoint: String,
    /// The share's public key (`bls12-381:hex`).
    pub public_key: String,
}

/// A committing party's query service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryFile {
    /// The party.
    pub party: PartyId,
    /// `host:port`.
    pub endpoint: String,
}

/// `tls`: the network CA and every certificate's holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    /// The CA certificate (PEM) every node and client trusts.
    pub ca: String,
    /// Every certificate of the network.
    pub certificates: Vec<TlsCertFile>,
}

/// One certificate: its name, holder and fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsCertFile {
    /// Its file name under `tls/` (`router-1`, `batcher-1-0`, `client`).
    pub name: String,
    /// The holder's role (`router`, …, `client`).
    pub role: String,
    /// The holder's party (0 for clients).
    pub party: PartyId,
    /// The holder's shard (batchers).
    #[serde(default)]
    pub shard: Option<ShardId>,
    /// SHA-256 of the certificate's DER, hex.
    pub sha256: String,
    /// The certificate itself (PEM): required for a certificate a config update adds,
    /// so that every consenter checks that the network CA signed it for this network
    /// (docs/reconfiguration.md "Rotating TLS certificates"); absent in generated configs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pem: Option<String>,
}

/// `committer`: what the committing parties share and where their nodes listen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitterFile {
    /// The key (`scheme:hex`) that endorses `_meta` txs (namespace creation and policy
    /// updates): the network's administrator.
    pub meta_policy: String,
    /// The parties that may run a committer, by party id.
    pub parties: Vec<CommitterPartyFile>,
}

/// One party's committer nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitterPartyFile {
    /// The party (1..N).
    pub party: PartyId,
    /// The sidecar's `host:port` (notifications and status lookups for clients).
    pub sidecar: String,
    /// The signature verifier's `host:port`.
    pub sigverifier: String,
    /// The validator-committer's `host:port`.
    pub vcservice: String,
}

/// One party's nodes and public keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartyFile {
    /// The party id (1..N, in list order).
    pub id: PartyId,
    /// The router's `host:port` (clients' `Router.Submit`).
    pub router: String,
    /// The consenter.
    pub consenter: KeyedEndpoint,
    /// The assembler's `host:port`, once assemblers run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assembler: Option<String>,
    /// One batcher per shard, in shard order.
    pub batchers: Vec<BatcherFile>,
    /// The public key (`scheme:hex`) of the party's admin, who signs config updates for
    /// the party. A party without one cannot sign updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_key: Option<String>,
}

/// A node that signs: its endpoint and public key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyedEndpoint {
    /// `host:port`.
    pub endpoint: String,
    /// `scheme:hex` (e.g. `ed25519:6a48…`), the form of `crypto::PublicKey`'s `Display`.
    pub public_key: String,
}

/// One batcher of a party.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatcherFile {
    /// Its shard.
    pub shard: ShardId,
    /// `host:port`: `BatcherIntake` for its router, the batch service for the shard's other
    /// batchers and the assemblers.
    pub endpoint: String,
    /// `scheme:hex`: signs its batch headers, BAFs and complaints.
    pub public_key: String,
}

/// The network-wide fields of `batcher::Config` (docs/batcher.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchingParams {
    /// Largest request, in bytes (1 MiB).
    pub max_request_bytes: u64,
    /// Most requests in one batch (1,000).
    pub max_batch_requests: u32,
    /// Most request bytes in one batch (4 MiB; at least `max_request_bytes`).
    pub max_batch_bytes: u64,
    /// A primary cuts a non-full batch once its oldest request waited this long (200 ms).
    pub batch_timeout_ms: u64,
    /// Most batches a primary has cut and not seen confirmed (10).
    pub window: u32,
    /// Most batches held persisted but not ordered (100; at least `window`).
    pub max_unordered_batches: u32,
    /// Most requests held (100,000).
    pub mempool_max_requests: u64,
    /// Most request bytes held (256 MiB; at least `max_request_bytes`).
    pub mempool_max_bytes: u64,
    /// Ordered request digests remembered to refuse resubmissions (1,000,000).
    pub ordered_memory: u64,
    /// A secondary forwards a request to the primary after this long (2 s).
    pub forward_timeout_ms: u64,
    /// A secondary complains about the primary after this long (5 s; at least
    /// `forward_timeout_ms`).
    pub complain_timeout_ms: u64,
}

impl Default for BatchingParams {
    fn default() -> BatchingParams {
        BatchingParams {
            max_request_bytes: 1 << 20,
            max_batch_requests: 1000,
            max_batch_bytes: 4 << 20,
            batch_timeout_ms: 200,
            window: 10,
            max_unordered_batches: 100,
            mempool_max_requests: 100_000,
            mempool_max_bytes: 256 << 20,
            ordered_memory: 1_000_000,
            forward_timeout_ms: 2_000,
            complain_timeout_ms: 5_000,
        }
    }
}

/// The consensus engine's parameters (`bft::Config`; the flags of `fabrx node bft`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsensusParams {
    /// The leader cuts a batch at this many requests (1,000).
    pub batch_max: u64,
    /// The leader cuts a batch at this many bytes (4 MiB).
    pub batch_max_bytes: u64,
    /// The leader cuts a non-empty batch after this long (50 ms).
    pub batch_interval_ms: u64,
    /// A request not ordered within this time makes a replica complain (3 s).
    pub request_timeout_ms: u64,
    /// Heartbeat interval (200 ms; below `heartbeat_timeout_ms`).
    pub heartbeat_interval_ms: u64,
    /// A follower that hears nothing from the leader this long starts a view change (2 s).
    pub heartbeat_timeout_ms: u64,
    /// Base time to wait for a new view (2 s; doubles per attempt).
    pub view_change_timeout_ms: u64,
    /// Largest request to the consenters (a BAF or complaint, or a client request of `fabrx node bft`), in bytes (1 MiB).
    pub max_request_bytes: u64,
    /// Most pending requests (100,000).
    pub max_pending: u64,
    /// Most bytes of pending requests (64 MiB).
    pub max_pending_bytes: u64,
    /// Clock tick of a replica (10 ms).
    pub tick_ms: u64,
    /// How far ahead of a shard's last ordered seq the Arma application counts BAFs (256;
    /// at least `batching.max_unordered_batches`, the most a batcher holds unordered).
    /// Every consenter must use the same value: it decides which BAFs count.
    pub max_seqs_ahead: u64,
}

impl Default for ConsensusParams {
    fn default() -> ConsensusParams {
        ConsensusParams {
            batch_max: 1000,
            batch_max_bytes: 4 << 20,
            batch_interval_ms: 50,
            request_timeout_ms: 3_000,
            heartbeat_interval_ms: 200,
            heartbeat_timeout_ms: 2_000,
            view_change_timeout_ms: 2_000,
            max_request_bytes: 1 << 20,
            max_pending: 100_000,
            max_pending_bytes: 64 << 20,
            tick_ms: 10,
            max_seqs_ahead: 256,
        }
    }
}

/// The routers' parameters (`router::RouterConfig`, docs/router.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouterParams {
    /// Largest envelope accepted (1 MiB; at most `batching.max_request_bytes`).
    pub max_request_bytes: u64,
    /// Most requests forwarded to one shard's batcher and not answered (1,024).
    pub shard_max_in_flight: u64,
    /// Most bytes of such requests per shard (64 MiB).
    pub shard_max_in_flight_bytes: u64,
    /// Most requests of one client stream awaiting their answer (256).
    pub stream_max_in_flight: u64,
    /// How long a forwarded request waits for the batcher's answer (10 s).
    pub answer_timeout_ms: u64,
    /// Whether clients must sign their requests, and with which keys.
    pub client_auth: ClientAuthFile,
    /// Which envelopes the network orders (`both`).
    pub request_format: RequestFormatFile,
}

impl Default for RouterParams {
    fn default() -> RouterParams {
        RouterParams {
            max_request_bytes: 1 << 20,
            shard_max_in_flight: 1024,
            shard_max_in_flight_bytes: 64 << 20,
            stream_max_in_flight: 256,
            answer_timeout_ms: 10_000,
            client_auth: ClientAuthFile::Open,
            request_format: RequestFormatFile::Both,
        }
    }
}

/// `router.client_auth`: `{"mode": "open"}` or `{"mode": "signed", "clients": […]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientAuthFile {
    /// Any client may submit; signatures are not checked.
    #[default]
    Open,
    /// Every envelope must be signed by one of these clients.
    Signed {
        /// The clients.
        clients: Vec<ClientFile>,
    },
}

/// One client: its identity (the envelope's `identity`) and public key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    /// `Identity.msp_id`.
    pub msp_id: String,
    /// `Identity.certificate_id` (the identity form fabrx clients use).
    pub certificate_id: String,
    /// `scheme:hex`.
    pub public_key: String,
}
