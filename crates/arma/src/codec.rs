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

/// The bytes of `pb::Batch::from(b).encode_to_vec()`, written straight from `b`: the
/// requests are copied once, into the output, instead of into a `Vec` each first (a
/// batcher encodes every batch it persists; docs/batcher.md "Store").
pub fn encode_batch(b: &SignedBatch) -> Vec<u8> {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
    let h = &b.header;
    let signature = b.signature.as_bytes();
    let delimited = |tag: u32, len: usize| key_len(tag) + encoded_len_varint(len as u64) + len;
    let varint = |tag: u32, v: u64| {
        if v == 0 {
            0
        } else {
            key_len(tag) + encoded_len_varint(v)
        }
    };
    let len = varint(1, u64::from(h.id.shard))
        + varint(2, u64::from(h.id.primary))
        + varint(3, h.id.seq)
        + b.requests.iter().map(|r| delimited(4, r.len())).sum::<usize>()
        + varint(5, h.term)
        + delimited(6, h.digest.len())
        + varint(7, u64::from(h.tx_count))
        + if signature.is_empty() {
            0
        } else {
            delimited(8, signature.len())
        };
    let mut out = Vec::with_capacity(len);
    let put_varint = |out: &mut Vec<u8>, tag: u32, v: u64| {
        if v != 0 {
            encode_key(tag, WireType::Varint, out);
            encode_varint(v, out);
        }
    };
    let put_bytes = |out: &mut Vec<u8>, tag: u32, bytes: &[u8]| {
        encode_key(tag, WireType::LengthDelimited, out);
        encode_varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    };
    put_varint(&mut out, 1, u64::from(h.id.shard));
    put_varint(&mut out, 2, u64::from(h.id.primary));
    put_varint(&mut out, 3, h.id.seq);
    for r in &b.requests {
        // Every element of a repeated field, empty ones included.
        put_bytes(&mut out, 4, r);
    }
    put_varint(&mut out, 5, h.term);
    put_bytes(&mut out, 6, &h.digest);
    put_varint(&mut out, 7, u64::from(h.tx_count));
    if !signature.is_empty() {
        put_bytes(&mut out, 8, signature);
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(shard: u32, primary: u32, seq: u64, term: u64, requests: &[&[u8]]) -> SignedBatch {
        let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, "codec-test");
        let requests = requests.iter().map(|r| Arc::from(*r)).collect();
        SignedBatch::sign(BatchId::new(shard, primary, seq), term, requests, &key)
    }

    #[test]
    fn a_batch_encodes_as_its_protobuf_message_does() {
        let long = vec![0xa5; 300];
        let huge = vec![7; 70_000];
        let cases = [
            batch(0, 1, 0, 0, &[b"x"]),
            batch(1, 4, 1, 0, &[b"a", b"", b"bc"]),
            batch(u32::MAX, u32::MAX, u64::MAX, u64::MAX, &[&long, &long]),
            batch(3, 2, 127, 128, &[&huge]),
            batch(0, 0, 0, 0, &[]),
        ];
        for b in &cases {
            let expected = pb::Batch::from(b).encode_to_vec();
            assert_eq!(encode_batch(b), expected, "{:?}", b.header);
            let back = SignedBatch::try_from(pb::Batch::decode(&expected[..]).expect("decodes"));
            assert_eq!(back.as_ref(), Ok(b));
        }
    }
}
