//! Domain separation: every tag this crate signs under lives here, and only here.
//!
//! A signature made for one [`Purpose`] never verifies for another:
//! - Ed25519 and ECDSA P-256 sign `tag ‖ 0x00 ‖ message`, where `tag` is
//!   [`Purpose::tag`] (ASCII, no NUL byte, so the prefix is unambiguous);
//! - BLS12-381 hashes the raw message to G2 with [`Purpose::bls_dst`] as the
//!   hash-to-curve domain-separation tag (RFC 9380), one DST per purpose.

use types::tags::crypto as tags;

use std::fmt;

/// Why something is signed. Each purpose has its own domain-separation tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Purpose {
    /// An endorser's (or threshold group's) signature over a transaction's namespace
    /// read-write set, checked by the sigverifier against the namespace policy.
    NamespaceEndorsement,
    /// A client's signature over a submitted request, optionally checked by routers.
    ClientRequest,
    /// A batcher's batch attestation fragment (BAF): shard, primary, seq, digest, tx count.
    BatchAttestation,
    /// A consenter's signature on a BFT protocol message (proposal, vote, view change).
    ConsensusMessage,
    /// A consenter's signature on an ordering decision; a quorum forms the certificate.
    DecisionCertificate,
    /// A consenter's signature on a block header delivered to assemblers and committers.
    BlockHeader,
    /// A party admin's signature on a network config update (docs/reconfiguration.md).
    ConfigUpdate,
}

/// DST of BLS proofs of possession (the message is the 48-byte compressed public key).
pub(crate) const POP_DST: &[u8] = tags::BLS_POP;

/// Prefix of the hash input of deterministic key derivation (see `docs/crypto.md`).
pub(crate) const KEYGEN_PREFIX: &[u8] = tags::KEYGEN_PREFIX;

/// Prefix of the seed hash of deterministic threshold dealing (see `docs/crypto.md`).
pub(crate) const THRESHOLD_DEAL_PREFIX: &[u8] = tags::THRESHOLD_DEAL_PREFIX;

impl Purpose {
    /// Every purpose, in declaration order.
    pub const ALL: [Purpose; 7] = [
        Purpose::NamespaceEndorsement,
        Purpose::ClientRequest,
        Purpose::BatchAttestation,
        Purpose::ConsensusMessage,
        Purpose::DecisionCertificate,
        Purpose::BlockHeader,
        Purpose::ConfigUpdate,
    ];

    /// The message-prefix tag used by Ed25519 and ECDSA P-256.
    pub const fn tag(self) -> &'static str {
        match self {
            Purpose::NamespaceEndorsement => tags::NAMESPACE_ENDORSEMENT,
            Purpose::ClientRequest => tags::CLIENT_REQUEST,
            Purpose::BatchAttestation => tags::BATCH_ATTESTATION,
            Purpose::ConsensusMessage => tags::CONSENSUS_MESSAGE,
            Purpose::DecisionCertificate => tags::DECISION_CERTIFICATE,
            Purpose::BlockHeader => tags::BLOCK_HEADER,
            Purpose::ConfigUpdate => tags::CONFIG_UPDATE,
        }
    }

    /// The BLS hash-to-curve domain-separation tag for this purpose.
    pub const fn bls_dst(self) -> &'static [u8] {
        match self {
            Purpose::NamespaceEndorsement => tags::BLS_NAMESPACE_ENDORSEMENT,
            Purpose::ClientRequest => tags::BLS_CLIENT_REQUEST,
            Purpose::BatchAttestation => tags::BLS_BATCH_ATTESTATION,
            Purpose::ConsensusMessage => tags::BLS_CONSENSUS_MESSAGE,
            Purpose::DecisionCertificate => tags::BLS_DECISION_CERTIFICATE,
            Purpose::BlockHeader => tags::BLS_BLOCK_HEADER,
            Purpose::ConfigUpdate => tags::BLS_CONFIG_UPDATE,
        }
    }

    /// The bytes Ed25519 / ECDSA actually sign: `tag ‖ 0x00 ‖ message`.
    pub(crate) fn prefixed(self, message: &[u8]) -> Vec<u8> {
        let tag = self.tag().as_bytes();
        let mut out = Vec::with_capacity(tag.len() + 1 + message.len());
        out.extend_from_slice(tag);
        out.push(0);
        out.extend_from_slice(message);
        out
    }
}

impl fmt::Display for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tag())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// RFC 9380 suite id of the hash-to-G2 every fabrx BLS DST ends with.
    const BLS_SUITE: &str = "BLS12381G2_XMD:SHA-256_SSWU_RO_POP_";

    #[test]
    fn tags_and_dsts_are_distinct_and_well_formed() {
        let tags: HashSet<_> = Purpose::ALL.iter().map(|p| p.tag()).collect();
        assert_eq!(tags.len(), Purpose::ALL.len());
        let mut dsts: HashSet<&[u8]> = Purpose::ALL.iter().map(|p| p.bls_dst()).collect();
        dsts.insert(POP_DST);
        assert_eq!(dsts.len(), Purpose::ALL.len() + 1);
        for p in Purpose::ALL {
            assert!(!p.tag().as_bytes().contains(&0), "{p:?} tag has a NUL");
            assert!(p.tag().starts_with("fabrx/v1/"));
            let dst = p.bls_dst();
            assert!(dst.ends_with(BLS_SUITE.as_bytes()), "{p:?} DST suite");
            assert!(dst.len() <= 255, "RFC 9380 caps DST at 255 bytes");
        }
        assert!(POP_DST.ends_with(BLS_SUITE.as_bytes()));
    }

    #[test]
    fn prefix_is_tag_nul_message() {
        let got = Purpose::BlockHeader.prefixed(b"abc");
        assert_eq!(got, b"fabrx/v1/block-header\0abc".to_vec());
    }

    #[test]
    fn no_tag_is_a_prefix_of_another() {
        for a in Purpose::ALL {
            for b in Purpose::ALL {
                if a != b {
                    let pa = a.prefixed(b"");
                    let pb = b.prefixed(b"");
                    assert!(!pb.starts_with(&pa), "{a:?} prefixes {b:?}");
                }
            }
        }
    }
}
