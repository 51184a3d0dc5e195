//! The application seam. The engine orders opaque requests; the application
//! assembles, verifies and applies proposals. All three calls must be deterministic
//! functions of the application state, which changes only through [`Application::apply`]
//! in decision order — so every correct replica verifies proposal `s` against the same
//! state. This is where the Arma consenter plugs in: its state (terms, BAF counts,
//! block numbers and hashes) lives behind this trait, `assemble` writes the block
//! headers into `metadata`, `verify_proposal` recomputes them.

use crate::certificate::Decision;
use crate::types::{Proposal, Seq, View};

/// Context handed to the leader's application when it assembles a proposal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProposalContext {
    /// Sequence number being proposed.
    pub seq: Seq,
    /// View of the leader.
    pub view: View,
}

/// The application driven by the engine.
pub trait Application {
    /// Checks a single client request before it enters the pending pool
    /// (size and structure; cheap).
    fn verify_request(&mut self, request: &[u8]) -> bool {
        !request.is_empty()
    }

    /// Leader side: returns the application metadata for a proposal carrying
    /// `requests` at `ctx.seq` (for Arma: the block headers derived from the BAFs).
    fn assemble(&mut self, ctx: ProposalContext, requests: &[Vec<u8>]) -> Vec<u8>;

    /// Follower side: true iff `proposal` is what a correct leader could have
    /// assembled in the current application state. A `false` triggers a view change.
    fn verify_proposal(&mut self, proposal: &Proposal) -> bool;

    /// Applies a decision. Called exactly once per sequence number, in order, also for
    /// decisions obtained by state transfer and when replaying the WAL after a restart
    /// for decisions above [`Application::applied`].
    fn apply(&mut self, decision: &Decision);

    /// The highest sequence number already applied (persisted by the application),
    /// 0 if none. Used on restart so the engine re-applies only what is missing.
    fn applied(&self) -> Seq;
}

/// A trivial application: accepts any non-empty requests, empty metadata, and just
/// counts applied decisions. Useful for tests and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct NullApp {
    /// Highest applied sequence number.
    pub applied: Seq,
    /// Number of requests applied.
    pub requests: u64,
}

impl Application for NullApp {
    fn assemble(&mut self, _ctx: ProposalContext, _requests: &[Vec<u8>]) -> Vec<u8> {
        Vec::new()
    }
    fn verify_proposal(&mut self, proposal: &Proposal) -> bool {
        proposal.metadata.is_empty()
    }
    fn apply(&mut self, decision: &Decision) {
        self.applied = decision.seq();
        self.requests += decision.proposal.requests.len() as u64;
    }
    fn applied(&self) -> Seq {
        self.applied
    }
}
