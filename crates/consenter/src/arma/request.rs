//! The requests batchers submit to the consenters: a `ConsenterRequest` holding one BAF or
//! one complaint (proto `fabrx/v1/orderer.proto`), decoded and checked against the
//! network's batcher keys.

use arma::{Baf, Complaint};
pub use arma::{encode_baf, encode_complaint};
use prost::Message as _;
use types::{PartyId, ShardId};
use wire::pb;

use super::error::{ArmaError, ArmaResult};
use super::state::ArmaConfig;

/// A decoded request: what the state machine counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A batch attestation fragment.
    Baf(Baf),
    /// A complaint against a shard's primary.
    Complaint(Complaint),
}

impl Item {
    /// The shard the item is about.
    pub fn shard(&self) -> ShardId {
        match self {
            Item::Baf(b) => b.header.id.shard,
            Item::Complaint(c) => c.shard,
        }
    }
}

/// Decodes a request without checking signatures (for decisions a quorum already
/// checked): structure, shard and parties only.
pub fn decode(cfg: &ArmaConfig, bytes: &[u8]) -> ArmaResult<Item> {
    let bad = |what: &'static str| ArmaError::Decode { what };
    let request = pb::ConsenterRequest::decode(bytes).map_err(|_| bad("not a ConsenterRequest"))?;
    let item = match request.kind.ok_or(bad("empty request"))? {
        pb::consenter_request::Kind::Baf(b) => Item::Baf(Baf::try_from(b).map_err(|e| bad(e.what))?),
        pb::consenter_request::Kind::Complaint(c) => {
            Item::Complaint(Complaint::try_from(c).map_err(|e| bad(e.what))?)
        }
    };
    cfg.check_shard(item.shard())?;
    match &item {
        Item::Baf(b) => {
            cfg.check_party(b.signer)?;
            cfg.check_party(b.header.id.primary)?;
        }
        Item::Complaint(c) => cfg.check_party(c.signer)?,
    }
    Ok(item)
}

/// Decodes a request and checks its signatures against the network's batcher keys: a
/// BAF's signer and primary signatures, a complaint's signer signature.
pub fn decode_verified(cfg: &ArmaConfig, bytes: &[u8]) -> ArmaResult<Item> {
    let item = decode(cfg, bytes)?;
    let bad = |which, party, shard| ArmaError::BadSignature { which, party, shard };
    match &item {
        Item::Baf(b) => {
            let shard = b.header.id.shard;
            let primary = b.header.id.primary;
            if !cfg.batcher_key(b.signer, shard).is_some_and(|k| b.verifies(k)) {
                return Err(bad("BAF", b.signer, shard));
            }
            if !cfg
                .batcher_key(primary, shard)
                .is_some_and(|k| b.primary_verifies(k))
            {
                return Err(bad("primary", primary, shard));
            }
        }
        Item::Complaint(c) => {
            if !cfg.batcher_key(c.signer, c.shard).is_some_and(|k| c.verifies(k)) {
                return Err(bad("complaint", c.signer, c.shard));
            }
        }
    }
    Ok(item)
}

/// Whether `party` is `1..=parties`.
pub(super) fn party_in_range(party: PartyId, parties: u32) -> bool {
    (1..=parties).contains(&party)
}
