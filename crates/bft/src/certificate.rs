//! Votes and certificates (PBFT §4.2 "prepared" and "committed-local" predicates made
//! transferable by signatures). A certificate is a quorum of signatures of distinct
//! replicas over the same `(instance, view, seq, digest)` vote; anyone holding the
//! verifier keys can check it without trusting the sender.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::crypto::{Signature, Verifier};
use crate::tags;
use crate::types::{ChainId, Digest, InstanceId, Members, Proposal, ReplicaId, Seq, View};
use crate::{Error, Result};

/// The two voting phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// PBFT prepare: "I accepted this proposal for (view, seq)".
    Prepare,
    /// PBFT commit: "a quorum prepared this proposal in (view, seq)".
    Commit,
}

/// The byte string a replica signs when voting `phase` for `digest` at `(view, seq)` in
/// cluster `chain`: `tag ‖ chain ‖ instance ‖ view ‖ seq ‖ digest`.
pub fn vote_bytes(
    chain: &ChainId,
    phase: Phase,
    instance: InstanceId,
    view: View,
    seq: Seq,
    d: &Digest,
) -> Vec<u8> {
    let tag = match phase {
        Phase::Prepare => tags::PREPARE,
        Phase::Commit => tags::COMMIT,
    };
    let mut out = Vec::with_capacity(tag.len() + 32 + 4 + 8 + 8 + 32);
    out.extend_from_slice(tag);
    out.extend_from_slice(&chain.0);
    out.extend_from_slice(&instance.0.to_le_bytes());
    out.extend_from_slice(&view.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&d.0);
    out
}

/// A quorum of signed votes of one phase for one `(instance, view, seq, digest)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate {
    /// Which phase the signatures vote in.
    pub phase: Phase,
    /// Instance of the votes.
    pub instance: InstanceId,
    /// View of the votes.
    pub view: View,
    /// Sequence number of the votes.
    pub seq: Seq,
    /// Digest of the proposal voted for.
    pub digest: Digest,
    /// Signatures of distinct replicas, sorted by replica id.
    pub signatures: Vec<(ReplicaId, Signature)>,
}

impl Certificate {
    /// Checks that the certificate holds at least a quorum of valid signatures of
    /// distinct `members`, signed for cluster `chain`.
    pub fn verify(&self, chain: &ChainId, verifier: &dyn Verifier, members: &Members) -> Result<()> {
        let quorum = members.quorum();
        let bytes = vote_bytes(
            chain,
            self.phase,
            self.instance,
            self.view,
            self.seq,
            &self.digest,
        );
        let mut seen = BTreeSet::new();
        for (replica, sig) in &self.signatures {
            if !members.contains(*replica) || !seen.insert(*replica) {
                return Err(Error::BadCertificate {
                    seq: self.seq,
                    reason: format!("duplicate or unknown signer {replica}"),
                });
            }
            if !verifier.verify(*replica, &bytes, sig) {
                return Err(Error::BadCertificate {
                    seq: self.seq,
                    reason: format!("invalid signature of replica {replica}"),
                });
            }
        }
        if (seen.len() as u32) < quorum.q {
            return Err(Error::BadCertificate {
                seq: self.seq,
                reason: format!("{} signatures, quorum is {}", seen.len(), quorum.q),
            });
        }
        Ok(())
    }
}

/// A prepared certificate with the proposal it certifies, carried through view
/// changes (PBFT §4.4: the `P` set of a view-change message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The prepared proposal.
    pub proposal: Arc<Proposal>,
    /// A quorum of prepare votes for it.
    pub certificate: Certificate,
}

impl Prepared {
    /// Verifies the prepare quorum and that it is for this proposal.
    pub fn verify(&self, chain: &ChainId, verifier: &dyn Verifier, members: &Members) -> Result<()> {
        let c = &self.certificate;
        if c.phase != Phase::Prepare
            || c.seq != self.proposal.seq
            || c.instance != self.proposal.instance
            || c.digest != self.proposal.digest()
        {
            return Err(Error::BadCertificate {
                seq: c.seq,
                reason: "prepared certificate does not match its proposal".into(),
            });
        }
        c.verify(chain, verifier, members)
    }
}

/// An ordered proposal together with the commit quorum that decided it. Any third
/// party can check it with [`verify_decision`]; state transfer ships these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The decided proposal.
    pub proposal: Arc<Proposal>,
    /// A quorum of commit votes for `proposal.digest()`.
    pub certificate: Certificate,
}

impl Decision {
    /// Sequence number of the decision.
    pub fn seq(&self) -> Seq {
        self.proposal.seq
    }
}

/// Verifies a decision certificate: a quorum of distinct `members` signed a commit vote
/// for exactly this proposal (same instance, sequence and digest) in cluster `chain`.
pub fn verify_decision(
    decision: &Decision,
    chain: &ChainId,
    verifier: &dyn Verifier,
    members: &Members,
) -> Result<()> {
    let c = &decision.certificate;
    let p = &decision.proposal;
    if c.phase != Phase::Commit || c.seq != p.seq || c.instance != p.instance {
        return Err(Error::BadCertificate {
            seq: c.seq,
            reason: "certificate is not a commit quorum for this proposal".into(),
        });
    }
    if c.digest != p.digest() {
        return Err(Error::BadCertificate {
            seq: c.seq,
            reason: "digest mismatch".into(),
        });
    }
    c.verify(chain, verifier, members)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{Signer, TestKeys};

    fn decision(keys: &TestKeys, signers: &[ReplicaId]) -> Decision {
        let p = Proposal {
            instance: InstanceId(2),
            seq: 5,
            requests: vec![b"r".to_vec()],
            metadata: vec![],
        };
        let d = p.digest();
        let bytes = vote_bytes(&ChainId::default(), Phase::Commit, InstanceId(2), 1, 5, &d);
        Decision {
            proposal: Arc::new(p),
            certificate: Certificate {
                phase: Phase::Commit,
                instance: InstanceId(2),
                view: 1,
                seq: 5,
                digest: d,
                signatures: signers
                    .iter()
                    .map(|&i| (i, keys.signer(i).sign(&bytes)))
                    .collect(),
            },
        }
    }

    #[test]
    fn verify_decision_cases() {
        let keys = TestKeys::new(1);
        let c = &ChainId::default();
        let four = Members::contiguous(4);
        assert!(verify_decision(&decision(&keys, &[0, 1, 2]), c, &keys, &four).is_ok());
        // the same certificate does not verify for another cluster
        assert!(verify_decision(&decision(&keys, &[0, 1, 2]), &ChainId([7; 32]), &keys, &four).is_err());
        // too few signers
        assert!(verify_decision(&decision(&keys, &[0, 1]), c, &keys, &four).is_err());
        // duplicate signer does not count twice
        assert!(verify_decision(&decision(&keys, &[0, 1, 1]), c, &keys, &four).is_err());
        // unknown signer
        assert!(verify_decision(&decision(&keys, &[0, 1, 4]), c, &keys, &four).is_err());
        // a set with a gap (replica 1 left): its members' quorum counts, a former
        // member's signature makes the certificate invalid
        let gap = Members::new(vec![0, 2, 3, 4]).unwrap();
        assert!(verify_decision(&decision(&keys, &[0, 2, 4]), c, &keys, &gap).is_ok());
        assert!(verify_decision(&decision(&keys, &[0, 1, 2]), c, &keys, &gap).is_err());
        assert!(verify_decision(&decision(&keys, &[0, 2]), c, &keys, &gap).is_err());
        // tampered payload
        let mut d = decision(&keys, &[0, 1, 2]);
        Arc::make_mut(&mut d.proposal).requests.push(b"x".to_vec());
        assert!(verify_decision(&d, c, &keys, &four).is_err());
        // signatures from other keys
        assert!(verify_decision(&decision(&TestKeys::new(9), &[0, 1, 2]), c, &keys, &four).is_err());
        // prepare quorum is not a decision
        let mut d = decision(&keys, &[0, 1, 2]);
        d.certificate.phase = Phase::Prepare;
        assert!(verify_decision(&d, c, &keys, &four).is_err());
    }
}
