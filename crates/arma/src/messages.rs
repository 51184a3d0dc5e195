//! What batchers exchange and sign: requests, batches with their signed header, batch
//! attestation fragments (BAFs, which double as acks to the primary) and complaints.
//!
//! Every signature is made under the crypto purpose `BatchAttestation` over bytes that
//! start with one of the tags of `types::tags::batcher`, so the three statements a batcher
//! signs ("I cut it", "I persisted and checked it", "I complain") never stand for another.
//! All integers are big-endian.

use std::sync::Arc;

use crypto::{PublicKey, Signature, SigningKey, sign_batch_attestation, verify_batch_attestation};
use sha2::{Digest as _, Sha256};
use types::digest::Digest32;
use types::tags::batcher as tags;
use types::{BatchId, PartyId, ShardId};

/// A client request as the router handed it over (already size-checked by the router).
pub type Request = Arc<[u8]>;

/// Digest of a request, the mempool's dedup key: `SHA-256(tags::REQUEST ‖ content)`,
/// over the request's content (`crate::content`: without the client signature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestDigest(pub Digest32);

/// A digest hashes as its first 8 bytes: it is a SHA-256 output, spread uniformly
/// whatever content a client sends (no client can steer it to a chosen value), so more
/// bytes would not spread it better. Equality still compares all 32.
impl std::hash::Hash for RequestDigest {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.0[..8]);
        state.write_u64(u64::from_le_bytes(first));
    }
}

/// A hasher for [`RequestDigest`] keys: their 8 bytes, xored with a seed secret to this
/// process and mixed with the SplitMix64 finaliser. The batcher looks every request's
/// digest up in several sets, and SipHash over each was a visible part of its CPU. The
/// secret seed keeps a client that grinds requests for digests with equal low bits from
/// crowding one bucket. Only for keys that are already hashes.
#[derive(Debug, Clone, Copy)]
pub struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        // The SplitMix64 finaliser: every input bit reaches every output bit.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}

/// Builds [`DigestHasher`]s with this map's secret seed.
#[derive(Debug, Clone, Copy)]
pub struct DigestHash {
    seed: u64,
}

impl Default for DigestHash {
    /// A seed from the standard library's random hasher keys.
    fn default() -> DigestHash {
        use std::hash::{BuildHasher as _, Hasher as _};
        DigestHash {
            seed: std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
        }
    }
}

impl std::hash::BuildHasher for DigestHash {
    type Hasher = DigestHasher;

    fn build_hasher(&self) -> DigestHasher {
        DigestHasher(self.seed)
    }
}

impl RequestDigest {
    /// The digest of `request`.
    pub fn of(request: &[u8]) -> RequestDigest {
        RequestDigest::of_content(&crate::content::pieces(request))
    }

    /// The digest of a request whose content is `content` (`crate::content::pieces`).
    pub fn of_content(content: &crate::content::Pieces<'_>) -> RequestDigest {
        let mut h = Sha256::new();
        h.update(tags::REQUEST);
        for piece in content.as_slice() {
            h.update(piece);
        }
        RequestDigest(h.finalize().into())
    }
}

/// The statement a primary signs about a batch it cut, and a BAF's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchHeader {
    /// (shard, primary, seq).
    pub id: BatchId,
    /// The term in which the primary cut the batch. A primary that returns in a later
    /// term may reuse a seq of an abandoned batch; the term tells the two apart, and the
    /// consenters count only BAFs of a shard's current term.
    pub term: u64,
    /// `types::digest::batch_digest` of the requests.
    pub digest: Digest32,
    /// Number of requests.
    pub tx_count: u32,
}

impl BatchHeader {
    /// `tag ‖ u32 shard ‖ u64 term ‖ u32 primary ‖ u64 seq ‖ digest[32] ‖ u32 tx_count`.
    fn bytes(&self, tag: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(tag.len() + 4 + 8 + 4 + 8 + 32 + 4);
        out.extend_from_slice(tag);
        out.extend_from_slice(&self.id.shard.to_be_bytes());
        out.extend_from_slice(&self.term.to_be_bytes());
        out.extend_from_slice(&self.id.primary.to_be_bytes());
        out.extend_from_slice(&self.id.seq.to_be_bytes());
        out.extend_from_slice(&self.digest);
        out.extend_from_slice(&self.tx_count.to_be_bytes());
        out
    }

    /// The bytes a primary signs for its batch: the header under `tags::BATCH_HEADER`.
    pub fn signed_bytes(&self) -> Vec<u8> {
        self.bytes(tags::BATCH_HEADER)
    }

    /// The bytes of a BAF: the header under `tags::BAF` (the signer is implied by the key).
    pub fn baf_bytes(&self) -> Vec<u8> {
        self.bytes(tags::BAF)
    }
}

/// A batch cut by a shard's primary, with the primary's signature over its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedBatch {
    /// The header the primary signed.
    pub header: BatchHeader,
    /// The requests, in order.
    pub requests: Vec<Request>,
    /// The primary's signature over [`BatchHeader::signed_bytes`].
    pub signature: Signature,
}

impl SignedBatch {
    /// Cuts and signs a batch of `requests` as `id.primary` in `term`.
    pub fn sign(id: BatchId, term: u64, requests: Vec<Request>, key: &SigningKey) -> SignedBatch {
        let header = BatchHeader {
            id,
            term,
            digest: types::digest::batch_digest(&requests),
            tx_count: u32::try_from(requests.len()).unwrap_or(u32::MAX),
        };
        let signature = sign_batch_attestation(key, &header.signed_bytes());
        SignedBatch {
            header,
            requests,
            signature,
        }
    }

    /// The batch id.
    pub fn id(&self) -> BatchId {
        self.header.id
    }

    /// Whether the header signature is `key`'s.
    pub fn signature_verifies(&self, key: &PublicKey) -> bool {
        verify_batch_attestation(key, &self.header.signed_bytes(), &self.signature).is_ok()
    }
}

/// A batch attestation fragment: `signer` persisted the batch of `header` and checked
/// every request in it. Sent to the consenters, and to the primary as its ack.
///
/// It carries the primary's signature over the header too: two BAFs whose primary
/// signatures verify over different digests for one `(shard, term, primary, seq)` prove
/// that the primary equivocated, whoever sent them (a Byzantine secondary cannot forge
/// it; docs/consenter.md "Equivocation").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Baf {
    /// The attested batch.
    pub header: BatchHeader,
    /// The attesting party.
    pub signer: PartyId,
    /// The sequence of the network config the signer had in force (0 at genesis):
    /// consenters count only BAFs of the config they have in force.
    pub config: u64,
    /// `signer`'s signature over [`Baf::signed_bytes`].
    pub signature: Signature,
    /// The primary's signature over [`BatchHeader::signed_bytes`] (from the batch).
    pub primary_signature: Signature,
}

impl Baf {
    /// What a BAF's signer signs: [`BatchHeader::baf_bytes`] ‖ u64 config sequence.
    pub fn signed_bytes(header: &BatchHeader, config: u64) -> Vec<u8> {
        let mut out = header.baf_bytes();
        out.extend_from_slice(&config.to_be_bytes());
        out
    }

    /// Signs a BAF for `batch` as `signer` under the genesis config (sequence 0).
    pub fn sign(batch: &SignedBatch, signer: PartyId, key: &SigningKey) -> Baf {
        Baf::sign_at(0, batch, signer, key)
    }

    /// Signs a BAF for `batch` as `signer` under the config of sequence `config`.
    pub fn sign_at(config: u64, batch: &SignedBatch, signer: PartyId, key: &SigningKey) -> Baf {
        let signature = sign_batch_attestation(key, &Baf::signed_bytes(&batch.header, config));
        Baf {
            header: batch.header,
            signer,
            config,
            signature,
            primary_signature: batch.signature.clone(),
        }
    }

    /// Whether the signature is `key`'s.
    pub fn verifies(&self, key: &PublicKey) -> bool {
        verify_batch_attestation(
            key,
            &Baf::signed_bytes(&self.header, self.config),
            &self.signature,
        )
        .is_ok()
    }

    /// Whether the primary's signature over the header is `primary_key`'s.
    pub fn primary_verifies(&self, primary_key: &PublicKey) -> bool {
        verify_batch_attestation(primary_key, &self.header.signed_bytes(), &self.primary_signature).is_ok()
    }
}

/// Why a secondary complains about the primary (Arma §4: censorship or bogus batches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComplaintReason {
    /// A request waited longer than `complain_timeout_ms` in the term.
    Censorship,
    /// The primary served a batch that fails verification.
    BogusBatch,
}

impl ComplaintReason {
    /// The stable string of the reason (the proto's `Complaint.reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            ComplaintReason::Censorship => "censorship",
            ComplaintReason::BogusBatch => "bogus-batch",
        }
    }
}

/// A signed complaint of `signer` against the primary of `shard` in `term`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Complaint {
    /// The shard.
    pub shard: ShardId,
    /// The term whose primary is blamed.
    pub term: u64,
    /// The complaining party.
    pub signer: PartyId,
    /// Why.
    pub reason: ComplaintReason,
    /// The sequence of the network config the signer had in force (0 at genesis).
    pub config: u64,
    /// `signer`'s signature over [`Complaint::signed_bytes`].
    pub signature: Signature,
}

impl Complaint {
    /// `tags::COMPLAINT ‖ u32 shard ‖ u64 term ‖ u32 signer ‖ u32 len(reason) ‖ reason ‖
    /// u64 config sequence`.
    pub fn signed_bytes(
        shard: ShardId,
        term: u64,
        signer: PartyId,
        reason: ComplaintReason,
        config: u64,
    ) -> Vec<u8> {
        let text = reason.as_str().as_bytes();
        let mut out = Vec::with_capacity(tags::COMPLAINT.len() + 28 + text.len());
        out.extend_from_slice(tags::COMPLAINT);
        out.extend_from_slice(&shard.to_be_bytes());
        out.extend_from_slice(&term.to_be_bytes());
        out.extend_from_slice(&signer.to_be_bytes());
        out.extend_from_slice(&u32::try_from(text.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(text);
        out.extend_from_slice(&config.to_be_bytes());
        out
    }

    /// Signs a complaint under the genesis config (sequence 0).
    pub fn sign(
        shard: ShardId,
        term: u64,
        signer: PartyId,
        reason: ComplaintReason,
        key: &SigningKey,
    ) -> Complaint {
        Complaint::sign_at(0, shard, term, signer, reason, key)
    }

    /// Signs a complaint under the config of sequence `config`.
    pub fn sign_at(
        config: u64,
        shard: ShardId,
        term: u64,
        signer: PartyId,
        reason: ComplaintReason,
        key: &SigningKey,
    ) -> Complaint {
        let bytes = Complaint::signed_bytes(shard, term, signer, reason, config);
        let signature = sign_batch_attestation(key, &bytes);
        Complaint {
            shard,
            term,
            signer,
            reason,
            config,
            signature,
        }
    }

    /// Whether the signature is `key`'s.
    pub fn verifies(&self, key: &PublicKey) -> bool {
        let bytes = Complaint::signed_bytes(self.shard, self.term, self.signer, self.reason, self.config);
        verify_batch_attestation(key, &bytes, &self.signature).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher as _;

    /// Equal digests hash equal; digests that agree in their first bytes but one (what a
    /// client grinding for one bucket would make) still spread over the low bits a hash
    /// table indexes by.
    #[test]
    fn the_digest_hasher_spreads_digests_equal_in_their_low_bits() {
        let h = DigestHash::default();
        let d = |last: u8| {
            let mut bytes = [0u8; 32];
            bytes[7] = last;
            RequestDigest(bytes)
        };
        assert_eq!(h.hash_one(d(1)), h.hash_one(d(1)));
        let buckets: std::collections::HashSet<u64> = (0..=255u8).map(|i| h.hash_one(d(i)) & 0xFF).collect();
        assert!(buckets.len() > 128, "{} buckets of 256", buckets.len());
    }
}
