//! The requests batchers submit to the consenters: a `ConsenterRequest` holding one BAF or
//! one complaint (proto `fabrx/v1/orderer.proto`), decoded and checked against the
//! network's batcher keys.

use batcher::{Baf, BatchHeader, Complaint, ComplaintReason};
use crypto::Signature;
use prost::Message as _;
use types::{BatchId, PartyId, ShardId};
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

/// Encodes a BAF as a consenter request.
pub fn encode_baf(baf: &Baf) -> Vec<u8> {
    let h = &baf.header;
    pb::ConsenterRequest {
        kind: Some(pb::consenter_request::Kind::Baf(pb::BatchAttestationFragment {
            shard: h.id.shard,
            primary: h.id.primary,
            seq: h.id.seq,
            digest: h.digest.to_vec(),
            tx_count: h.tx_count,
            signer: baf.signer,
            signature: baf.signature.as_bytes().to_vec(),
            term: h.term,
            primary_signature: baf.primary_signature.as_bytes().to_vec(),
        })),
    }
    .encode_to_vec()
}

/// Encodes a complaint as a consenter request.
pub fn encode_complaint(c: &Complaint) -> Vec<u8> {
    pb::ConsenterRequest {
        kind: Some(pb::consenter_request::Kind::Complaint(pb::Complaint {
            shard: c.shard,
            term: c.term,
            signer: c.signer,
            reason: c.reason.as_str().to_string(),
            signature: c.signature.as_bytes().to_vec(),
        })),
    }
    .encode_to_vec()
}

/// Decodes a request without checking signatures (for decisions a quorum already
/// checked): structure, shard and parties only.
pub fn decode(cfg: &ArmaConfig, bytes: &[u8]) -> ArmaResult<Item> {
    let bad = |what: &'static str| ArmaError::Decode { what };
    let request = pb::ConsenterRequest::decode(bytes).map_err(|_| bad("not a ConsenterRequest"))?;
    let item = match request.kind.ok_or(bad("empty request"))? {
        pb::consenter_request::Kind::Baf(b) => Item::Baf(baf_from_pb(b)?),
        pb::consenter_request::Kind::Complaint(c) => Item::Complaint(complaint_from_pb(c)?),
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

/// Longest signature accepted (every scheme of crates/crypto fits).
const MAX_SIGNATURE_BYTES: usize = 256;

fn signature(bytes: &[u8], what: &'static str) -> ArmaResult<Signature> {
    if bytes.is_empty() || bytes.len() > MAX_SIGNATURE_BYTES {
        return Err(ArmaError::Decode { what });
    }
    Ok(Signature::from_bytes(bytes))
}

fn baf_from_pb(b: pb::BatchAttestationFragment) -> ArmaResult<Baf> {
    let digest: [u8; 32] = b
        .digest
        .as_slice()
        .try_into()
        .map_err(|_| ArmaError::Decode { what: "BAF digest" })?;
    Ok(Baf {
        header: BatchHeader {
            id: BatchId::new(b.shard, b.primary, b.seq),
            term: b.term,
            digest,
            tx_count: b.tx_count,
        },
        signer: b.signer,
        signature: signature(&b.signature, "BAF signature")?,
        primary_signature: signature(&b.primary_signature, "BAF primary signature")?,
    })
}

fn complaint_from_pb(c: pb::Complaint) -> ArmaResult<Complaint> {
    let reason = match c.reason.as_str() {
        "censorship" => ComplaintReason::Censorship,
        "bogus-batch" => ComplaintReason::BogusBatch,
        _ => {
            return Err(ArmaError::Decode {
                what: "complaint reason",
            });
        }
    };
    Ok(Complaint {
        shard: c.shard,
        term: c.term,
        signer: c.signer,
        reason,
        signature: signature(&c.signature, "complaint signature")?,
    })
}

/// Whether `party` is `1..=parties`.
pub(super) fn party_in_range(party: PartyId, parties: u32) -> bool {
    (1..=parties).contains(&party)
}
