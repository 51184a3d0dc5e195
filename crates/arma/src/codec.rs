//! BAFs, complaints and batches ↔ `wire::pb` (proto `fabrx/v1/orderer.proto`).
//!
//! Decoding checks only the structure (lengths, known reason strings); signatures and
//! ranges are the receiver's business (the consenter checks them against the network's
//! batcher keys, a secondary with `verify_batch`).

use std::sync::Arc;

use crypto::Signature;
use prost::Message as _;
use types::BatchId;
use wire::pb;

use crate::messages::{Baf, BatchHeader, Complaint, ComplaintReason, SignedBatch};

/// Longest signature accepted (every scheme of crates/crypto fits).
const MAX_SIGNATURE_BYTES: usize = 256;

/// A message from the wire that is not a well-formed BAF, complaint or batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what}")]
pub struct CodecError {
    /// What is missing or malformed.
    pub what: &'static str,
}

fn signature(bytes: &[u8], what: &'static str) -> Result<Signature, CodecError> {
    if bytes.is_empty() || bytes.len() > MAX_SIGNATURE_BYTES {
        return Err(CodecError { what });
    }
    Ok(Signature::from_bytes(bytes))
}

fn digest(bytes: &[u8], what: &'static str) -> Result<[u8; 32], CodecError> {
    bytes.try_into().map_err(|_| CodecError { what })
}

impl From<&Baf> for pb::BatchAttestationFragment {
    fn from(baf: &Baf) -> pb::BatchAttestationFragment {
        let h = &baf.header;
        pb::BatchAttestationFragment {
            shard: h.id.shard,
            primary: h.id.primary,
            seq: h.id.seq,
            digest: h.digest.to_vec(),
            tx_count: h.tx_count,
            signer: baf.signer,
            signature: baf.signature.as_bytes().to_vec(),
            term: h.term,
            primary_signature: baf.primary_signature.as_bytes().to_vec(),
            config_sequence: baf.config,
        }
    }
}

impl TryFrom<pb::BatchAttestationFragment> for Baf {
    type Error = CodecError;
    fn try_from(b: pb::BatchAttestationFragment) -> Result<Baf, CodecError> {
        Ok(Baf {
            header: BatchHeader {
                id: BatchId::new(b.shard, b.primary, b.seq),
                term: b.term,
                digest: digest(&b.digest, "BAF digest")?,
                tx_count: b.tx_count,
            },
            signer: b.signer,
            config: b.config_sequence,
            signature: signature(&b.signature, "BAF signature")?,
            primary_signature: signature(&b.primary_signature, "BAF primary signature")?,
        })
    }
}

impl From<&Complaint> for pb::Complaint {
    fn from(c: &Complaint) -> pb::Complaint {
        pb::Complaint {
            shard: c.shard,
            term: c.term,
            signer: c.signer,
            reason: c.reason.as_str().to_string(),
            signature: c.signature.as_bytes().to_vec(),
            config_sequence: c.config,
        }
    }
}

impl TryFrom<pb::Complaint> for Complaint {
    type Error = CodecError;
    fn try_from(c: pb::Complaint) -> Result<Complaint, CodecError> {
        let reason = match c.reason.as_str() {
            "censorship" => ComplaintReason::Censorship,
            "bogus-batch" => ComplaintReason::BogusBatch,
            _ => {
                return Err(CodecError {
                    what: "complaint reason",
                });
            }
        };
        Ok(Complaint {
            shard: c.shard,
            term: c.term,
            signer: c.signer,
            reason,
            config: c.config_sequence,
            signature: signature(&c.signature, "complaint signature")?,
        })
    }
}

impl From<&SignedBatch> for pb::Batch {
    fn from(b: &SignedBatch) -> pb::Batch {
        let h = &b.header;
        pb::Batch {
            shard: h.id.shard,
            primary: h.id.primary,
            seq: h.id.seq,
            requests: b.requests.iter().map(|r| r.to_vec()).collect(),
            term: h.term,
            digest: h.digest.to_vec(),
            tx_count: h.tx_count,
            signature: b.signature.as_bytes().to_vec(),
            request_digests: Vec::new(),
        }
    }
}

impl TryFrom<pb::Batch> for SignedBatch {
    type Error = CodecError;
    /// Structure only: the digest, tx count and signature are taken as claimed;
    /// `batcher::verify_batch` checks them. A compact batch (request digests in place of
    /// the requests) is not a batch: only a batcher that asked for one reads it.
    fn try_from(b: pb::Batch) -> Result<SignedBatch, CodecError> {
        if !b.request_digests.is_empty() {
            return Err(CodecError {
                what: "batch (compact where a full one was expected)",
            });
        }
        Ok(SignedBatch {
            header: BatchHeader {
                id: BatchId::new(b.shard, b.primary, b.seq),
                term: b.term,
                digest: digest(&b.digest, "batch digest")?,
                tx_count: b.tx_count,
            },
            requests: b
                .requests
                .into_iter()
                .map(|r| Arc::from(r.into_boxed_slice()))
                .collect(),
            signature: signature(&b.signature, "batch signature")?,
        })
    }
}

/// A BAF as a consenter request (what a batcher submits to the consenters).
pub fn encode_baf(baf: &Baf) -> Vec<u8> {
    pb::ConsenterRequest {
        kind: Some(pb::consenter_request::Kind::Baf(baf.into())),
    }
    .encode_to_vec()
}

/// A complaint as a consenter request.
pub fn encode_complaint(c: &Complaint) -> Vec<u8> {
    pb::ConsenterRequest {
        kind: Some(pb::consenter_request::Kind::Complaint(c.into())),
    }
    .encode_to_vec()
}
