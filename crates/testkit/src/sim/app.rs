//! The simulated application: a hash chain over decided proposals. Its metadata for
//! sequence `s` is the first 8 bytes of the digest of decision `s-1`, so followers
//! really verify proposals against application state that changes with decisions.

use bft::{Application, Decision, Proposal, ProposalContext, Seq};

/// Application state of one simulated replica (its "ledger"; survives crashes).
#[derive(Clone, Debug, Default)]
pub struct SimApp {
    /// Digests (8-byte prefixes) of applied proposals, index = seq - 1.
    pub chain: Vec<[u8; 8]>,
}

impl SimApp {
    fn head(&self) -> Vec<u8> {
        self.chain.last().map_or(vec![0; 8], |h| h.to_vec())
    }
}

impl Application for SimApp {
    fn assemble(&mut self, _ctx: ProposalContext, _requests: &[Vec<u8>]) -> Vec<u8> {
        self.head()
    }

    fn verify_proposal(&mut self, proposal: &Proposal) -> bool {
        proposal.seq == self.applied() + 1 && proposal.metadata == self.head()
    }

    fn apply(&mut self, decision: &Decision) {
        assert_eq!(decision.seq(), self.applied() + 1, "application fed out of order");
        let d = decision.proposal.digest();
        self.chain.push(d.0[..8].try_into().expect("8 bytes"));
    }

    fn applied(&self) -> Seq {
        self.chain.len() as Seq
    }
}
