//! Blocks as assemblers serve them (`fabrx.v1.OrderedBlock`, docs/assembler.md): an
//! ordered header, its batch's requests and the proof of the decision that ordered it.
//! [`verify_pb_block`] checks one without trusting its sender: a quorum of the
//! consenters' commit signatures over the decision, the header listed in the decision's
//! metadata at its index, the data hash (the batch digest of the requests, when they
//! are carried) and the chain to the previous block.

use bft::{ChainId, Members, ReplicaId, Verifier};
use types::digest::{Digest32, batch_digest};
use wire::pb;

use crate::decision::{DecisionWireError, proof_from_parts};
use crate::header::OrderedHeader;
use crate::proof::DecisionProof;

impl From<&DecisionProof> for pb::DecisionProof {
    fn from(p: &DecisionProof) -> pb::DecisionProof {
        pb::DecisionProof {
            decision: p.decision,
            view: p.view,
            requests_root: p.requests_root.to_vec(),
            metadata: p.metadata.clone(),
            signatures: p
                .signatures
                .iter()
                .map(|(signer, sig)| pb::ConsenterSignature {
                    signer: *signer,
                    signature: sig.0.clone(),
                })
                .collect(),
        }
    }
}

impl TryFrom<&pb::DecisionProof> for DecisionProof {
    type Error = DecisionWireError;

    fn try_from(p: &pb::DecisionProof) -> Result<DecisionProof, DecisionWireError> {
        proof_from_parts(p.decision, p.view, &p.requests_root, &p.metadata, &p.signatures)
    }
}

/// Why a served block was refused.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    /// A field is missing or malformed, or the proof does not verify.
    #[error(transparent)]
    Wire(#[from] DecisionWireError),
    /// The header or the proof is missing.
    #[error("block without {0}")]
    Missing(&'static str),
    /// The requests do not have the header's data hash.
    #[error("block {number}: the requests do not have the header's batch digest")]
    DataHash {
        /// The block.
        number: u64,
    },
    /// The block does not follow the previous one.
    #[error("block {number} does not follow block {previous}: {reason}")]
    Chain {
        /// The block.
        number: u64,
        /// The previous block's number.
        previous: u64,
        /// What differs.
        reason: &'static str,
    },
}

/// A served block that verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedBlock {
    /// Its header.
    pub header: OrderedHeader,
    /// The header's hash (the next block's previous hash).
    pub hash: Digest32,
    /// The consenters (replica ids; party `p` runs replica `p − 1`) whose signature
    /// verified: at least a quorum of the set in force.
    pub signers: Vec<ReplicaId>,
    /// Whether the requests were carried (and their digest checked).
    pub with_requests: bool,
}

/// Checks a served block (see the module docs). `previous` is the number and hash of
/// the block before it, when the caller holds it; `None` skips the chain check (the
/// first block a reader sees, unless it is block 0, whose previous hash must be zeros).
pub fn verify_pb_block(
    block: &pb::OrderedBlock,
    previous: Option<(u64, Digest32)>,
    chain: &ChainId,
    verifier: &dyn Verifier,
    members: &Members,
) -> Result<VerifiedBlock, BlockError> {
    let header = OrderedHeader::try_from(block.header.as_ref().ok_or(BlockError::Missing("a header"))?)?;
    let proof = DecisionProof::try_from(block.proof.as_ref().ok_or(BlockError::Missing("a proof"))?)?;
    let (signers, metadata) = proof
        .verify(chain, verifier, members)
        .map_err(DecisionWireError::from)?;
    proof
        .proves(&metadata, &header)
        .map_err(DecisionWireError::from)?;
    let with_requests = !block.requests.is_empty() || header.tx_count == 0;
    if with_requests && batch_digest(&block.requests) != header.digest {
        return Err(BlockError::DataHash {
            number: header.number,
        });
    }
    let chained = match previous {
        Some((number, hash)) => {
            if header.number != number.saturating_add(1) {
                Some((number, "its number is not the next one"))
            } else if header.previous_hash != hash {
                Some((number, "its previous hash is not the previous block's hash"))
            } else {
                None
            }
        }
        None if header.number == 0 && header.previous_hash != [0; 32] => {
            Some((0, "block 0 must have a zero previous hash"))
        }
        None => None,
    };
    if let Some((previous, reason)) = chained {
        return Err(BlockError::Chain {
            number: header.number,
            previous,
            reason,
        });
    }
    Ok(VerifiedBlock {
        hash: header.hash(),
        header,
        signers,
        with_requests,
    })
}
