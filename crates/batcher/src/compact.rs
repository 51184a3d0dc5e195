//! Compact batches (docs/batcher.md "Compact pulls"): a primary's batch with the request
//! digests in place of the requests. Every party's router sends the requests it admits to
//! its own batcher, so a secondary usually holds every request of the primary's batch
//! already: the digests let it rebuild the batch from its own pending requests, and the
//! request bytes cross the link once (router to batcher) instead of twice.

use prost::Message as _;
use types::BatchId;
use wire::pb;

use crate::messages::{BatchHeader, RequestDigest, SignedBatch};

/// A primary's batch as request digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactBatch {
    /// The header the primary signed.
    pub header: BatchHeader,
    /// The request digests, in order.
    pub digests: Vec<RequestDigest>,
    /// The primary's signature over [`BatchHeader::signed_bytes`].
    pub signature: crypto::Signature,
}

impl CompactBatch {
    /// The batch's id.
    pub fn id(&self) -> BatchId {
        self.header.id
    }

    /// The compact form of `batch`, whose request digests are `digests`.
    pub fn of(batch: &SignedBatch, digests: Vec<RequestDigest>) -> CompactBatch {
        CompactBatch {
            header: batch.header,
            digests,
            signature: batch.signature.clone(),
        }
    }
}

/// `digests` packed as the `request_digests` field carries them: 32 bytes each, in order.
pub fn pack_digests(digests: &[RequestDigest]) -> Vec<u8> {
    let mut packed = Vec::with_capacity(digests.len().saturating_mul(32));
    for d in digests {
        packed.extend_from_slice(&d.0);
    }
    packed
}

/// The wire form of a compact batch: `batch`'s header and signature, no requests, and the
/// request digests `packed` by [`pack_digests`].
pub fn encode_compact(batch: &SignedBatch, packed: &[u8]) -> pb::Batch {
    let h = &batch.header;
    pb::Batch {
        shard: h.id.shard,
        primary: h.id.primary,
        seq: h.id.seq,
        requests: Vec::new(),
        term: h.term,
        digest: h.digest.to_vec(),
        tx_count: h.tx_count,
        signature: batch.signature.as_bytes().to_vec(),
        request_digests: packed.to_vec(),
    }
}

/// The size of a compact batch's message, to compare with the full one's.
pub fn encoded_len(batch: &pb::Batch) -> usize {
    batch.encoded_len()
}

impl TryFrom<pb::Batch> for CompactBatch {
    type Error = arma::CodecError;
    /// Structure only, as for a full batch: the digests must be whole (a multiple of 32
    /// bytes, at least one) and no request may come with them; the count, digest and
    /// signature are checked by the core.
    fn try_from(mut b: pb::Batch) -> Result<CompactBatch, arma::CodecError> {
        let packed = std::mem::take(&mut b.request_digests);
        if packed.is_empty() || !packed.len().is_multiple_of(32) || !b.requests.is_empty() {
            return Err(arma::CodecError {
                what: "compact batch digests",
            });
        }
        let SignedBatch {
            header, signature, ..
        } = SignedBatch::try_from(b)?;
        let digests = packed
            .chunks_exact(32)
            .map(|c| {
                let mut d = [0u8; 32];
                d.copy_from_slice(c);
                RequestDigest(d)
            })
            .collect();
        Ok(CompactBatch {
            header,
            digests,
            signature,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> SignedBatch {
        let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, "fabrx-compact-test");
        let requests: Vec<crate::Request> = vec![b"one".to_vec().into(), b"two".to_vec().into()];
        SignedBatch::sign(BatchId::new(1, 2, 3), 4, requests, &key)
    }

    #[test]
    fn a_compact_batch_round_trips_and_a_full_reader_refuses_it() {
        let b = batch();
        let digests: Vec<_> = b.requests.iter().map(|r| RequestDigest::of(r)).collect();
        let wire = encode_compact(&b, &pack_digests(&digests));
        assert!(encoded_len(&wire) < encoded_len(&pb::Batch::from(&b)) + 64);
        let back = CompactBatch::try_from(wire.clone()).unwrap();
        assert_eq!(back, CompactBatch::of(&b, digests));
        assert!(SignedBatch::try_from(wire).is_err());
    }

    #[test]
    fn malformed_compact_batches_are_refused() {
        let b = batch();
        let digests: Vec<_> = b.requests.iter().map(|r| RequestDigest::of(r)).collect();
        let good = encode_compact(&b, &pack_digests(&digests));
        let cut = pb::Batch {
            request_digests: good.request_digests[..40].to_vec(),
            ..good.clone()
        };
        let empty = pb::Batch {
            request_digests: Vec::new(),
            ..good.clone()
        };
        let both = pb::Batch {
            requests: vec![b"one".to_vec()],
            ..good.clone()
        };
        let no_signature = pb::Batch {
            signature: Vec::new(),
            ..good
        };
        for bad in [cut, empty, both, no_signature] {
            assert!(CompactBatch::try_from(bad).is_err());
        }
    }
}
