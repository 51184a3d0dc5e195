//! Replica sets that change at a decision (reconfiguration, docs/bft.md
//! "Reconfiguration").
//!
//! The application decides what a decision means for the replica set: after
//! [`crate::Application::apply`] the engine compares [`crate::Application::epoch`] with
//! its own and, when the application moved on, takes the new set from
//! [`crate::Application::membership`] and switches at once — before the decision is
//! delivered, so every correct replica switches at the same sequence number. The
//! decision that changes the set is certified by the old set; every later one by the
//! new set.

use std::fmt;
use std::sync::Arc;

use crate::crypto::{Signer, Verifier};
use crate::types::{ChainId, ReplicaId};

/// A replica set and this replica's place in it.
pub struct Membership {
    /// Counts the switches: 0 for the set a replica is built with, one more each time
    /// the set changes. Every correct replica numbers the sets alike.
    pub epoch: u64,
    /// The set's cluster id: bound into every signed byte string, so a vote or a
    /// certificate of one set never counts in another. A new set must have a new id.
    pub chain: ChainId,
    /// Number of replicas, `0..n`.
    pub n: u32,
    /// This replica's id in the set; `None` if it is not a member (a replica that
    /// left, or one that will join at a later set): it votes, proposes and complains
    /// no more, serves state transfer and follows the decisions by state transfer.
    pub id: Option<ReplicaId>,
    /// Checks the members' signatures.
    pub verifier: Arc<dyn Verifier>,
    /// Signs for this replica in the set (needed when `id` is some).
    pub signer: Option<Box<dyn Signer>>,
}

impl fmt::Debug for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Membership")
            .field("epoch", &self.epoch)
            .field("chain", &self.chain)
            .field("n", &self.n)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}
