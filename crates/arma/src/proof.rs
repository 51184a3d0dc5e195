//! Checking a decision's headers without the consenters' state (assemblers, batchers,
//! `fabrx blocks`): ADR 0009.
//!
//! A decision's commit certificate is q signatures over the vote bytes of
//! `(chain, commit, instance, view, seq, proposal digest)`, and the proposal digest is
//! `bft::proposal_digest(instance, seq, requests_root, metadata)`. The metadata lists the
//! hash of every header of the decision and its term changes, so the certificate with the
//! requests root and the metadata proves each header: that is the quorum of header
//! signatures a block carries.

use std::collections::BTreeSet;

use bft::{ChainId, InstanceId, Members, Phase, ReplicaId, Signature, Verifier};

use crate::error::{ProofError as ArmaError, ProofResult as ArmaResult};
use crate::header::{Metadata, OrderedHeader};

/// What proves a decision's headers and term changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionProof {
    /// The BFT instance (0 for a consenter cluster).
    pub instance: InstanceId,
    /// The decision's BFT sequence number.
    pub decision: u64,
    /// The view its commit votes were cast in.
    pub view: u64,
    /// The root of its requests ([`bft::Proposal::requests_root`]).
    pub requests_root: [u8; 32],
    /// Its metadata ([`crate::Outcome::metadata`]).
    pub metadata: Vec<u8>,
    /// Commit signatures by replica id (party `p` runs replica `p − 1`).
    pub signatures: Vec<(ReplicaId, Signature)>,
}

impl DecisionProof {
    /// Checks the signatures: returns the replicas whose signature verified (sorted) and
    /// the decoded metadata, or an error if fewer than a quorum of `members` verified.
    /// Invalid, repeated signers and signers outside `members` (a replica that left, or
    /// one not yet joined) are skipped, not fatal: a block is valid when a quorum of the
    /// set in force signed it.
    pub fn verify(
        &self,
        chain: &ChainId,
        verifier: &dyn Verifier,
        members: &Members,
    ) -> ArmaResult<(Vec<ReplicaId>, Metadata)> {
        let fail = |reason: String| ArmaError::Proof {
            decision: self.decision,
            reason,
        };
        let metadata = Metadata::decode(&self.metadata).map_err(|e| fail(e.to_string()))?;
        let digest = bft::proposal_digest(self.instance, self.decision, &self.requests_root, &self.metadata);
        let bytes = bft::vote_bytes(
            chain,
            Phase::Commit,
            self.instance,
            self.view,
            self.decision,
            &digest,
        );
        let mut good = BTreeSet::new();
        for (replica, sig) in &self.signatures {
            if members.contains(*replica) && !good.contains(replica) && verifier.verify(*replica, &bytes, sig)
            {
                good.insert(*replica);
            }
        }
        let q = members.quorum().q;
        if (good.len() as u32) < q {
            return Err(fail(format!(
                "{} valid commit signatures, quorum is {q}",
                good.len()
            )));
        }
        Ok((good.into_iter().collect(), metadata))
    }

    /// Checks that `header` is the `header.index`-th header of this decision's metadata.
    pub fn proves(&self, metadata: &Metadata, header: &OrderedHeader) -> ArmaResult<()> {
        let listed = metadata.header_hashes.get(header.index as usize);
        if header.decision != self.decision || listed != Some(&header.hash()) {
            return Err(ArmaError::Proof {
                decision: self.decision,
                reason: format!(
                    "block {} is not header {} of the decision",
                    header.number, header.index
                ),
            });
        }
        Ok(())
    }
}
