//! The simulated application: a hash chain over decided proposals. Its metadata for
//! sequence `s` is the first 8 bytes of the digest of decision `s-1`, so followers
//! really verify proposals against application state that changes with decisions.
//!
//! It remembers every request it applied and refuses them again (in `verify_request`
//! and `verify_proposal`): the engine de-duplicates only within the decisions it keeps
//! after a checkpoint, and an application must recognise older repeats itself
//! (docs/bft.md "Checkpoints"). Its snapshot is `applied ‖ head ‖ sorted request
//! digests`, so checkpoints and state transfer are exercised by every simulation.

use std::collections::BTreeSet;

use bft::{Application, Decision, Digest, Proposal, ProposalContext, Seq};

/// Application state of one simulated replica (its "ledger"; survives crashes).
#[derive(Clone, Debug, Default)]
pub struct SimApp {
    /// The installed snapshot's sequence number (0: none).
    base: Seq,
    /// The installed snapshot's head.
    base_head: [u8; 8],
    /// Decisions applied after `base`: the head after each and its request digests.
    chain: Vec<([u8; 8], Vec<[u8; 32]>)>,
    /// Every request applied (installed ones included).
    decided: BTreeSet<[u8; 32]>,
}

impl SimApp {
    /// The head: the 8-byte digest prefix of the last applied decision (zeros before).
    pub fn head(&self) -> [u8; 8] {
        self.chain.last().map_or(self.base_head, |(h, _)| *h)
    }

    /// Forgets the last `k` applied decisions (not below an installed snapshot): a
    /// shell that lost its last few deliveries in a crash.
    pub fn forget_last(&mut self, k: usize) {
        for _ in 0..k {
            let Some((_, digests)) = self.chain.pop() else {
                return;
            };
            for d in digests {
                self.decided.remove(&d);
            }
        }
    }

    fn is_new(&self, request: &[u8]) -> bool {
        !self.decided.contains(&Digest::of_request(request).0)
    }
}

impl Application for SimApp {
    fn verify_request(&mut self, request: &[u8]) -> bool {
        !request.is_empty() && self.is_new(request)
    }

    fn assemble(&mut self, _ctx: ProposalContext, _requests: &[Vec<u8>]) -> Vec<u8> {
        self.head().to_vec()
    }

    fn verify_proposal(&mut self, proposal: &Proposal) -> bool {
        proposal.seq == self.applied() + 1
            && proposal.metadata == self.head()
            && proposal.requests.iter().all(|r| self.is_new(r))
    }

    fn apply(&mut self, decision: &Decision) {
        assert_eq!(decision.seq(), self.applied() + 1, "application fed out of order");
        let d = decision.proposal.digest();
        let digests: Vec<[u8; 32]> = decision
            .proposal
            .requests
            .iter()
            .map(|r| Digest::of_request(r).0)
            .collect();
        self.decided.extend(digests.iter().copied());
        self.chain.push((d.0[..8].try_into().expect("8 bytes"), digests));
    }

    fn applied(&self) -> Seq {
        self.base + self.chain.len() as Seq
    }

    fn snapshot(&self) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(16 + 32 * self.decided.len());
        out.extend_from_slice(&self.applied().to_le_bytes());
        out.extend_from_slice(&self.head());
        for d in &self.decided {
            out.extend_from_slice(d);
        }
        Some(out)
    }

    fn install_snapshot(&mut self, seq: Seq, snapshot: &[u8]) -> bool {
        let (Some(applied), Some(head), Some(rest)) =
            (snapshot.get(..8), snapshot.get(8..16), snapshot.get(16..))
        else {
            return false;
        };
        if u64::from_le_bytes(applied.try_into().expect("8 bytes")) != seq || rest.len() % 32 != 0 {
            return false;
        }
        self.base = seq;
        self.base_head = head.try_into().expect("8 bytes");
        self.chain.clear();
        self.decided = rest
            .chunks_exact(32)
            .map(|c| c.try_into().expect("32 bytes"))
            .collect();
        true
    }
}
