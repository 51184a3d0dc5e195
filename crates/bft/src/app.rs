//! The application seam. The engine orders opaque requests; the application
//! assembles, verifies and applies proposals. All three calls must be deterministic
//! functions of the application state, which changes only through [`Application::apply`]
//! in decision order — so every correct replica verifies proposal `s` against the same
//! state. This is where the Arma consenter plugs in: its state (terms, BAF counts,
//! block numbers and hashes) lives behind this trait, `assemble` writes the block
//! headers into `metadata`, `verify_proposal` recomputes them.

use crate::certificate::Decision;
use crate::membership::Membership;
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

    /// The application state after the last applied decision, as bytes every correct
    /// replica produces identically (checkpoints compare their digests). `None` (the
    /// default) means the application cannot snapshot: no checkpoints are taken and the
    /// engine keeps its decisions and WAL whole.
    fn snapshot(&self) -> Option<Vec<u8>> {
        None
    }

    /// Replaces the application state by `snapshot`, the state after decision `seq`
    /// certified by a quorum (state transfer, or a restart whose WAL was pruned past what
    /// the application persisted). False if the bytes do not decode; the engine then
    /// keeps its state and asks elsewhere.
    fn install_snapshot(&mut self, seq: Seq, snapshot: &[u8]) -> bool {
        let _ = (seq, snapshot);
        false
    }

    /// The epoch of the replica set the application state says is in force (0: the set
    /// the replica was built with). It changes only through [`Application::apply`] (a
    /// decision that reconfigures) or [`Application::install_snapshot`]; the engine
    /// compares it with its own after each and then asks [`Application::membership`].
    fn epoch(&self) -> u64 {
        0
    }

    /// The replica set of [`Application::epoch`], with this replica's id and signer in
    /// it. `None` leaves the engine in its current set (an application that cannot
    /// tell, which makes the replica stop taking part: it is its application's error).
    fn membership(&mut self) -> Option<Membership> {
        None
    }

    /// The replica set of epoch `epoch` that `decision` installs, read from the
    /// decision alone, without the application state before it (`None`: the decision
    /// changes no set). The engine checked that the set of epoch `epoch − 1` certified
    /// the decision; it asks when a stable checkpoint of a later set reaches a replica
    /// of an earlier one by state transfer, with the decisions that switched sets in
    /// between.
    fn membership_from(&mut self, decision: &Decision, epoch: u64) -> Option<Membership> {
        let _ = (decision, epoch);
        None
    }
}

/// A trivial application: accepts any non-empty requests, empty metadata, and just
/// counts applied decisions. Useful for tests and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct NullApp {
    /// Highest applied sequence number.
    pub applied: Seq,
    /// Number of requests applied.
    pub requests: u64,
    /// Whether it offers snapshots (`applied` and `requests`), so the engine checkpoints.
    /// Off by default: a shell that keeps every decision as its ledger (the plain
    /// consenter node) must not have decisions replaced by a snapshot.
    pub snapshots: bool,
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
    fn snapshot(&self) -> Option<Vec<u8>> {
        self.snapshots
            .then(|| [self.applied.to_le_bytes(), self.requests.to_le_bytes()].concat())
    }
    fn install_snapshot(&mut self, seq: Seq, snapshot: &[u8]) -> bool {
        let (Some(a), Some(r)) = (snapshot.get(..8), snapshot.get(8..)) else {
            return false;
        };
        let (Ok(a), Ok(r)) = (<[u8; 8]>::try_from(a), <[u8; 8]>::try_from(r)) else {
            return false;
        };
        if !self.snapshots || u64::from_le_bytes(a) != seq {
            return false;
        }
        self.applied = seq;
        self.requests = u64::from_le_bytes(r);
        true
    }
}
