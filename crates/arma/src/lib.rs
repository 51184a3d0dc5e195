//! The nouns Arma's roles share (Arma §4; docs/contracts.md "Protocol facts the roles
//! agree on"): client requests as batchers hold them, batches with their primary's
//! signature, batch attestation fragments (BAFs), complaints, the bytes each is signed
//! over, their wire form, and the rule that names a shard's primary.
//!
//! Batchers produce them (`crates/batcher`), consenters count them (`crates/consenter`),
//! assemblers check batches against ordered headers. Pure: no I/O.
//!
//! * [`admission`] — what a client request must be to be ordered (routers and batchers
//!   check it alike).
//! * [`fabric`] — Fabric envelopes and blocks: the checks a Fabric envelope passes, the
//!   genesis config block and the Fabric block of each ordered batch (docs/fabric.md).
//! * [`content`] — a request's content (its bytes without the client signature): what its
//!   shard and dedup key are computed over (ADR 0015).
//! * `messages` — the types and their signed bytes (docs/batcher.md "Signed bytes").
//! * `codec` — conversions to and from `wire::pb` (proto `fabrx/v1/orderer.proto`).
//! * `header`, `proof`, `decision`, `cluster` — ordered block headers, a decision's
//!   metadata and proof (ADR 0009), the served `Decision` and its check, the consenter
//!   set's keys and chain id: what a batcher or assembler needs to trust a decision.

pub mod admission;
mod block;
mod cluster;
mod codec;
pub mod content;
mod decision;
mod error;
pub mod fabric;
mod header;
mod messages;
mod parties;
mod proof;
mod reconfig;
mod sets;

pub use block::{BlockError, VerifiedBlock, verify_pb_block};
pub use cluster::{CertificateVerifier, ClusterKeys, DEFAULT_CHAIN};
pub use codec::{CodecError, encode_baf, encode_batch, encode_complaint};
pub use decision::{DecisionWireError, VerifiedDecision, verify_pb_decision};
pub use error::{ProofError, ProofResult};
pub use header::{CONFIG_SHARD, CertifiedConfig, ConfigChange, Metadata, OrderedHeader, Outcome, TermChange};
pub use messages::{
    Baf, BatchHeader, Complaint, ComplaintReason, DigestHash, DigestHasher, Request, RequestDigest,
    SignedBatch,
};
pub use parties::{LEAVE_GRACE_MS, MAX_PARTIES, Parties, PartiesError};
pub use proof::DecisionProof;
pub use reconfig::{BatchingView, ConfigRules, ConfigView};
pub use sets::{ConsenterSets, SetsError};

use types::{PartyId, ShardId};

/// The primary of shard `shard` in `term` among the parties in force
/// ([`Parties::primary_of`]: with parties `1..=N`, `((shard + term) mod N) + 1`).
pub fn primary_of(shard: ShardId, term: u64, parties: &Parties) -> PartyId {
    parties.primary_of(shard, term)
}
