//! Batches, BAFs and complaints to and from their protobuf form (`wire::pb`,
//! `proto/fabrx/v1/orderer.proto`), and the bytes of a `ConsenterRequest`, the one
//! message batchers submit to the consenters (each BFT request is one of these, encoded).
//!
//! Pure: no tokio, no I/O. Decoding checks the *shape* of every field (a 32-byte
//! digest, a signature of 1..=[`MAX_SIGNATURE_BYTES`] bytes, parties from 1, a known
//! complaint reason) and rejects a malformed message with [`Error::Malformed`]; what a
//! message *means* (signatures, seqs, digests of requests) is checked by the core
//! (`verify_batch`, `Baf::verifies`, `Complaint::verifies`) or by the consenters.

use std::sync::Arc;

use crypto::Signature;
use prost::Message as _;
use types::BatchId;
use types::digest::Digest32;
use wire::pb;

use crate::messages::{Baf, BatchHeader, Complaint, ComplaintReason, SignedBatch};
use crate::{Error, Result};

/// Longest signature accepted on the wire (Ed25519 64, ECDSA P-256 at most 72 in DER,
/// BLS12-381 96 bytes).
pub const MAX_SIGNATURE_BYTES: usize = 256;

/// What a batcher submits to the consenters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsenterRequest {
    /// A batch attestation fragment.
    Baf(Baf),
    /// A complaint against the shard's primary.
    Complaint(Complaint),
}

impl From<Baf> for ConsenterRequest {
    fn from(baf: Baf) -> ConsenterRequest {
        ConsenterRequest::Baf(baf)
    }
}

impl From<Complaint> for ConsenterRequest {
    fn from(complaint: Complaint) -> ConsenterRequest {
        ConsenterRequest::Complaint(complaint)
    }
}

fn malformed(message: &'static str, field: &'static str, reason: impl Into<String>) -> Error {
    Error::Malformed {
        message,
        field,
        reason: reason.into(),
    }
}

fn digest(message: &'static str, field: &'static str, bytes: &[u8]) -> Result<Digest32> {
    <Digest32>::try_from(bytes)
        .map_err(|_| malformed(message, field, format!("{} bytes, not 32", bytes.len())))
}

fn signature(message: &'static str, bytes: Vec<u8>) -> Result<Signature> {
    if bytes.is_empty() || bytes.len() > MAX_SIGNATURE_BYTES {
        return Err(malformed(
            message,
            "signature",
            format!("{} bytes, not 1..={MAX_SIGNATURE_BYTES}", bytes.len()),
        ));
    }
    Ok(Signature::from_bytes(bytes))
}

fn party(message: &'static str, field: &'static str, value: u32) -> Result<u32> {
    if value == 0 {
        return Err(malformed(message, field, "parties are numbered from 1"));
    }
    Ok(value)
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
        }
    }
}

impl TryFrom<pb::Batch> for SignedBatch {
    type Error = Error;

    /// Checks the shape only; the tx count, digest and signature are checked against the
    /// requests by `verify_batch` (a mismatch there is evidence for a complaint).
    fn try_from(b: pb::Batch) -> Result<SignedBatch> {
        const M: &str = "Batch";
        let header = BatchHeader {
            id: BatchId::new(b.shard, party(M, "primary", b.primary)?, b.seq),
            term: b.term,
            digest: digest(M, "digest", &b.digest)?,
            tx_count: b.tx_count,
        };
        Ok(SignedBatch {
            header,
            requests: b.requests.into_iter().map(Arc::from).collect(),
            signature: signature(M, b.signature)?,
        })
    }
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
        }
    }
}

impl TryFrom<pb::BatchAttestationFragment> for Baf {
    type Error = Error;

    fn try_from(b: pb::BatchAttestationFragment) -> Result<Baf> {
        const M: &str = "BatchAttestationFragment";
        Ok(Baf {
            header: BatchHeader {
                id: BatchId::new(b.shard, party(M, "primary", b.primary)?, b.seq),
                term: b.term,
                digest: digest(M, "digest", &b.digest)?,
                tx_count: b.tx_count,
            },
            signer: party(M, "signer", b.signer)?,
            signature: signature(M, b.signature)?,
        })
    }
}

impl std::str::FromStr for ComplaintReason {
    type Err = Error;

    fn from_str(s: &str) -> Result<ComplaintReason> {
        [ComplaintReason::Censorship, ComplaintReason::BogusBatch]
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                let shown: String = s.chars().take(64).collect();
                malformed("Complaint", "reason", format!("unknown reason {shown:?}"))
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
        }
    }
}

impl TryFrom<pb::Complaint> for Complaint {
    type Error = Error;

    fn try_from(c: pb::Complaint) -> Result<Complaint> {
        const M: &str = "Complaint";
        Ok(Complaint {
            shard: c.shard,
            term: c.term,
            signer: party(M, "signer", c.signer)?,
            reason: c.reason.parse()?,
            signature: signature(M, c.signature)?,
        })
    }
}

impl From<&ConsenterRequest> for pb::ConsenterRequest {
    fn from(r: &ConsenterRequest) -> pb::ConsenterRequest {
        let kind = match r {
            ConsenterRequest::Baf(baf) => pb::consenter_request::Kind::Baf(baf.into()),
            ConsenterRequest::Complaint(c) => pb::consenter_request::Kind::Complaint(c.into()),
        };
        pb::ConsenterRequest { kind: Some(kind) }
    }
}

impl TryFrom<pb::ConsenterRequest> for ConsenterRequest {
    type Error = Error;

    fn try_from(r: pb::ConsenterRequest) -> Result<ConsenterRequest> {
        match r.kind {
            Some(pb::consenter_request::Kind::Baf(b)) => Ok(ConsenterRequest::Baf(b.try_into()?)),
            Some(pb::consenter_request::Kind::Complaint(c)) => Ok(ConsenterRequest::Complaint(c.try_into()?)),
            None => Err(Error::MissingField {
                message: "ConsenterRequest",
                field: "kind",
            }),
        }
    }
}

/// A borrowed BAF or complaint, what [`encode_consenter_request`] takes
/// (`&Baf`, `&Complaint` and `&ConsenterRequest` convert into it).
#[derive(Debug, Clone, Copy)]
pub enum ConsenterRequestRef<'a> {
    /// A BAF.
    Baf(&'a Baf),
    /// A complaint.
    Complaint(&'a Complaint),
}

impl<'a> From<&'a Baf> for ConsenterRequestRef<'a> {
    fn from(baf: &'a Baf) -> Self {
        ConsenterRequestRef::Baf(baf)
    }
}

impl<'a> From<&'a Complaint> for ConsenterRequestRef<'a> {
    fn from(c: &'a Complaint) -> Self {
        ConsenterRequestRef::Complaint(c)
    }
}

impl<'a> From<&'a ConsenterRequest> for ConsenterRequestRef<'a> {
    fn from(r: &'a ConsenterRequest) -> Self {
        match r {
            ConsenterRequest::Baf(b) => ConsenterRequestRef::Baf(b),
            ConsenterRequest::Complaint(c) => ConsenterRequestRef::Complaint(c),
        }
    }
}

/// The bytes a batcher submits to the consenters (`BftConsensus.Submit`): an encoded
/// `ConsenterRequest`. Takes `&Baf`, `&Complaint` or `&ConsenterRequest`.
pub fn encode_consenter_request<'a>(request: impl Into<ConsenterRequestRef<'a>>) -> Vec<u8> {
    let kind = match request.into() {
        ConsenterRequestRef::Baf(baf) => pb::consenter_request::Kind::Baf(baf.into()),
        ConsenterRequestRef::Complaint(c) => pb::consenter_request::Kind::Complaint(c.into()),
    };
    pb::ConsenterRequest { kind: Some(kind) }.encode_to_vec()
}

/// Decodes one BFT request as a `ConsenterRequest` and checks its shape (the consenter
/// application's first step; signatures are checked there with the batchers' keys).
pub fn decode_consenter_request(bytes: &[u8]) -> Result<ConsenterRequest> {
    let decoded = pb::ConsenterRequest::decode(bytes).map_err(|e| Error::Undecodable {
        message: "ConsenterRequest",
        reason: e.to_string(),
    })?;
    decoded.try_into()
}
