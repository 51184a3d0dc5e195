//! A consenter decision on the wire (`fabrx.v1.Decision`, served by `Consenter.Decisions`)
//! and how a receiver checks it (docs/consenter.md "Header signatures", ADR 0009).
//!
//! What a consenter serves for one applied decision (its headers, term changes, view,
//! requests root, metadata and the commit certificate's signatures) is built by
//! `consenter::decision_wire::to_pb_decision`.
//! * `TryFrom` conversions from the protobuf messages to [`OrderedHeader`],
//!   [`TermChange`] and [`DecisionProof`], refusing malformed fields with a
//!   [`DecisionWireError`].
//! * [`verify_pb_decision`] — what an assembler or batcher calls on every received
//!   decision: the certificate verifies under the consenters' keys (a quorum of valid
//!   signatures) and proves every header and term change it carries.

use bft::{ChainId, InstanceId, Members, ReplicaId, Signature, Verifier};
use wire::pb;

use crate::error::ProofError;
use crate::header::{CertifiedConfig, OrderedHeader, TermChange};
use crate::proof::DecisionProof;
use sha2::{Digest as _, Sha256};

/// Why a received `fabrx.v1.Decision` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionWireError {
    /// A fixed-size field has the wrong length.
    #[error("{what} must be {expected} bytes, got {got}")]
    BadLength {
        /// The field.
        what: &'static str,
        /// Its size.
        expected: usize,
        /// What arrived.
        got: usize,
    },
    /// A signature is empty or longer than any scheme's.
    #[error("signature of consenter {signer} is {len} bytes")]
    BadSignature {
        /// The signer.
        signer: u32,
        /// Its length.
        len: usize,
    },
    /// The certificate does not verify, or its metadata does not decode.
    #[error(transparent)]
    Proof(#[from] ProofError),
    /// The headers carried are not exactly those the metadata lists.
    #[error("decision {decision}: the metadata lists {listed} headers, {carried} carried")]
    HeaderCount {
        /// The decision.
        decision: u64,
        /// Header hashes in the metadata.
        listed: usize,
        /// Headers in the message.
        carried: usize,
    },
    /// A header is not at its index, or belongs to another decision.
    #[error("decision {decision}: header {position} (block {number}) has index {index}")]
    HeaderIndex {
        /// The decision.
        decision: u64,
        /// Its position in the message.
        position: usize,
        /// Its block number.
        number: u64,
        /// The index it claims.
        index: u32,
    },
    /// The term changes carried are not those the metadata lists.
    #[error("decision {decision}: the term changes differ from the metadata")]
    TermsDiffer {
        /// The decision.
        decision: u64,
    },
    /// The config carried is not the one the metadata certifies (or its config block's
    /// header is missing), or a config is carried by a decision that put none in force.
    #[error("decision {decision}: the config carried is not the one its certificate names")]
    ConfigDiffers {
        /// The decision.
        decision: u64,
    },
}

/// Longest signature accepted (every scheme of crates/crypto fits).
const MAX_SIGNATURE_BYTES: usize = 256;

fn array32(bytes: &[u8], what: &'static str) -> Result<[u8; 32], DecisionWireError> {
    bytes.try_into().map_err(|_| DecisionWireError::BadLength {
        what,
        expected: 32,
        got: bytes.len(),
    })
}

impl From<&OrderedHeader> for pb::OrderedHeader {
    fn from(h: &OrderedHeader) -> pb::OrderedHeader {
        pb::OrderedHeader {
            number: h.number,
            previous_hash: h.previous_hash.to_vec(),
            batch_digest: h.digest.to_vec(),
            shard: h.shard,
            primary: h.primary,
            seq: h.seq,
            term: h.term,
            decision: h.decision,
            index: h.index,
            tx_count: h.tx_count,
        }
    }
}

impl TryFrom<&pb::OrderedHeader> for OrderedHeader {
    type Error = DecisionWireError;

    fn try_from(h: &pb::OrderedHeader) -> Result<OrderedHeader, DecisionWireError> {
        Ok(OrderedHeader {
            number: h.number,
            previous_hash: array32(&h.previous_hash, "previous_hash")?,
            digest: array32(&h.batch_digest, "batch_digest")?,
            shard: h.shard,
            term: h.term,
            primary: h.primary,
            seq: h.seq,
            decision: h.decision,
            index: h.index,
            tx_count: h.tx_count,
        })
    }
}

impl From<&TermChange> for pb::TermChange {
    fn from(t: &TermChange) -> pb::TermChange {
        pb::TermChange {
            shard: t.shard,
            term: t.term,
            last_ordered_seq: t.last_ordered_seq,
        }
    }
}

impl From<&pb::TermChange> for TermChange {
    fn from(t: &pb::TermChange) -> TermChange {
        TermChange {
            shard: t.shard,
            term: t.term,
            last_ordered_seq: t.last_ordered_seq,
        }
    }
}

/// The proof of a served decision. The instance is 0: a consenter cluster runs one BFT
/// instance (`bft::Config::new`'s default), and the wire message does not carry it.
impl TryFrom<&pb::Decision> for DecisionProof {
    type Error = DecisionWireError;

    fn try_from(d: &pb::Decision) -> Result<DecisionProof, DecisionWireError> {
        proof_from_parts(d.number, d.view, &d.requests_root, &d.metadata, &d.signatures)
    }
}

/// A proof from its wire fields (a served decision's or a block's).
pub(crate) fn proof_from_parts(
    decision: u64,
    view: u64,
    requests_root: &[u8],
    metadata: &[u8],
    signatures: &[pb::ConsenterSignature],
) -> Result<DecisionProof, DecisionWireError> {
    let signatures = signatures
        .iter()
        .map(|s| {
            if s.signature.is_empty() || s.signature.len() > MAX_SIGNATURE_BYTES {
                return Err(DecisionWireError::BadSignature {
                    signer: s.signer,
                    len: s.signature.len(),
                });
            }
            Ok((s.signer, Signature(s.signature.clone())))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(DecisionProof {
        instance: InstanceId(0),
        decision,
        view,
        requests_root: array32(requests_root, "requests_root")?,
        metadata: metadata.to_vec(),
        signatures,
    })
}

/// A received decision whose certificate verified and proves its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedDecision {
    /// The decision number.
    pub number: u64,
    /// The consenters (replica ids; party `p` runs replica `p − 1`) whose commit
    /// signature verified: at least a quorum of the set in force.
    pub signers: Vec<ReplicaId>,
    /// Its headers, each proven by the certificate, in order.
    pub headers: Vec<OrderedHeader>,
    /// Its term changes, proven by the certificate.
    pub terms: Vec<TermChange>,
    /// The network config it put in force, proven by the certificate: what the metadata
    /// says of it, and its canonical bytes.
    pub config: Option<(CertifiedConfig, Vec<u8>)>,
}

/// Checks a served decision: a quorum of the consenters `members` (keys behind `verifier`,
/// cluster `chain`) signed its proposal digest, and the headers and term changes it
/// carries are exactly those its metadata lists. Nothing else of the message is
/// trusted.
pub fn verify_pb_decision(
    decision: &pb::Decision,
    chain: &ChainId,
    verifier: &dyn Verifier,
    members: &Members,
) -> Result<VerifiedDecision, DecisionWireError> {
    let proof = DecisionProof::try_from(decision)?;
    let (signers, metadata) = proof.verify(chain, verifier, members)?;
    if metadata.header_hashes.len() != decision.headers.len() {
        return Err(DecisionWireError::HeaderCount {
            decision: proof.decision,
            listed: metadata.header_hashes.len(),
            carried: decision.headers.len(),
        });
    }
    let mut headers = Vec::with_capacity(decision.headers.len());
    for (position, h) in decision.headers.iter().enumerate() {
        let header = OrderedHeader::try_from(h)?;
        if header.index as usize != position {
            return Err(DecisionWireError::HeaderIndex {
                decision: proof.decision,
                position,
                number: header.number,
                index: header.index,
            });
        }
        proof.proves(&metadata, &header)?;
        headers.push(header);
    }
    let terms: Vec<TermChange> = decision.terms.iter().map(TermChange::from).collect();
    if terms != metadata.terms {
        return Err(DecisionWireError::TermsDiffer {
            decision: proof.decision,
        });
    }
    let differs = DecisionWireError::ConfigDiffers {
        decision: proof.decision,
    };
    let config = match metadata.config {
        None if decision.config.is_empty() => None,
        None => return Err(differs),
        Some(certified) => {
            let digest: [u8; 32] = Sha256::digest(&decision.config).into();
            let block = OrderedHeader::config_digest(&decision.config);
            let in_block = headers.iter().any(|h| h.is_config() && h.digest == block);
            if digest != certified.digest || !in_block {
                return Err(differs);
            }
            Some((certified, decision.config.clone()))
        }
    };
    Ok(VerifiedDecision {
        number: proof.decision,
        signers,
        headers,
        terms,
        config,
    })
}
