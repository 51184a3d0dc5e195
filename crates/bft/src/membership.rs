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

use sha2::{Digest as _, Sha256};

use crate::crypto::{Signer, Verifier};
use crate::tags;
use crate::types::{ChainId, Members, ReplicaId};

/// The cluster id a replica set of `epoch` signs under: `chain` itself for the first
/// set, `SHA-256(tag ‖ chain ‖ epoch)` for every later one. Binding the epoch makes the
/// sets' ids distinct even when an application gives two sets the same id (keys rotated
/// back, say): a view change or certificate of one set never verifies in another.
pub fn set_chain(chain: ChainId, epoch: u64) -> ChainId {
    if epoch == 0 {
        return chain;
    }
    let mut h = Sha256::new();
    h.update(tags::SET_CHAIN);
    h.update(chain.0);
    h.update(epoch.to_le_bytes());
    ChainId(h.finalize().into())
}

/// A replica set and this replica's place in it.
pub struct Membership {
    /// Counts the switches: 0 for the set a replica is built with, one more each time
    /// the set changes. Every correct replica numbers the sets alike.
    pub epoch: u64,
    /// The set's cluster id as the application names it; the engine signs under
    /// [`set_chain`]`(chain, epoch)`, bound into every signed byte string, so a vote or a
    /// certificate of one set never counts in another.
    pub chain: ChainId,
    /// The members' stable ids (sorted, distinct, non-empty: [`Members::new`]). A
    /// replica keeps its id in every set; a set that leaves one out removes it, and an
    /// id is never given again (a joiner takes one above every id used).
    pub members: Members,
    /// This replica's stable id. It is a member iff `members` lists it and `signer` is
    /// some; otherwise (a replica that left, or one that will join at a later set) it
    /// votes, proposes and complains no more, serves state transfer and follows the
    /// decisions by state transfer. `None` when the application does not name it: the
    /// replica keeps its id if the set does not list it, else it takes one above
    /// every member.
    pub id: Option<ReplicaId>,
    /// Checks the members' signatures.
    pub verifier: Arc<dyn Verifier>,
    /// Signs for this replica in the set (needed when `id` is some).
    pub signer: Option<Box<dyn Signer>>,
    /// The set's limits and timing (`None`: those in force stay).
    pub params: Option<crate::EngineParams>,
}

impl Membership {
    /// Whether the replica this membership is for is a member of the set.
    pub fn is_member(&self) -> bool {
        self.signer.is_some() && self.id.is_some_and(|id| self.members.contains(id))
    }
}

impl fmt::Debug for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Membership")
            .field("epoch", &self.epoch)
            .field("chain", &self.chain)
            .field("members", &self.members)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_epoch_signs_under_its_own_id_even_when_the_application_reuses_one() {
        let c = ChainId([7; 32]);
        assert_eq!(set_chain(c, 0), c, "the first set keeps the application's id");
        let ids: std::collections::BTreeSet<ChainId> = (0..64).map(|e| set_chain(c, e)).collect();
        assert_eq!(ids.len(), 64);
        assert_ne!(set_chain(c, 1), set_chain(ChainId([8; 32]), 1));
    }
}
