//! What a batcher submits to the consenters: one `ConsenterRequest` (proto
//! `fabrx/v1/orderer.proto`) holding a BAF or a complaint, encoded; each BFT request is
//! one of these.
//!
//! The conversions of batches, BAFs and complaints to and from `wire::pb` live with the
//! types in the shared `arma` crate (`From<&Baf> for pb::BatchAttestationFragment`,
//! `TryFrom<pb::Batch> for SignedBatch`, ...), which decode the **shape** of every field —
//! 32-byte digests, signatures of 1..=256 bytes, a known complaint reason — and refuse a
//! malformed message with [`arma::CodecError`] naming it. This module adds the request
//! enum and its bytes. Pure: no tokio, no I/O. What a message *means* (signatures, seqs,
//! parties, the digest of the requests) is checked by the core (`verify_batch`,
//! `Baf::verifies`) or by the consenters.

use prost::Message as _;
use wire::pb;

use crate::{Baf, Complaint, Error, Result};

pub use arma::CodecError;

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
/// `ConsenterRequest` (the same bytes as `arma::encode_baf` / `arma::encode_complaint`).
/// Takes `&Baf`, `&Complaint` or `&ConsenterRequest`.
pub fn encode_consenter_request<'a>(request: impl Into<ConsenterRequestRef<'a>>) -> Vec<u8> {
    match request.into() {
        ConsenterRequestRef::Baf(baf) => arma::encode_baf(baf),
        ConsenterRequestRef::Complaint(c) => arma::encode_complaint(c),
    }
}

impl TryFrom<pb::ConsenterRequest> for ConsenterRequest {
    type Error = Error;

    fn try_from(r: pb::ConsenterRequest) -> Result<ConsenterRequest> {
        match r.kind {
            Some(pb::consenter_request::Kind::Baf(b)) => Ok(ConsenterRequest::Baf(b.try_into()?)),
            Some(pb::consenter_request::Kind::Complaint(c)) => Ok(ConsenterRequest::Complaint(c.try_into()?)),
            Some(pb::consenter_request::Kind::ConfigUpdate(_)) => Err(Error::Undecodable {
                message: "ConsenterRequest",
                reason: "a config update, not a batcher's BAF or complaint".into(),
            }),
            None => Err(Error::MissingField {
                message: "ConsenterRequest",
                field: "kind",
            }),
        }
    }
}

/// Decodes one BFT request as a `ConsenterRequest` and checks its shape (the consenter
/// application does the same in `consenter::application::request`, with its own error type, and
/// then checks parties and signatures).
pub fn decode_consenter_request(bytes: &[u8]) -> Result<ConsenterRequest> {
    let decoded = pb::ConsenterRequest::decode(bytes).map_err(|e| Error::Undecodable {
        message: "ConsenterRequest",
        reason: e.to_string(),
    })?;
    decoded.try_into()
}
