//! Switching replica sets at a decision (docs/bft.md "Reconfiguration").
//!
//! After every change of the application state (a decision applied, a snapshot
//! installed) the replica compares the application's [`Application::epoch`] with its
//! own. When the application moved on, the replica takes the new set from
//! [`Application::membership`] and switches before it delivers the decision: its
//! cluster id, `n`, quorum, keys and own id become the new set's, it persists
//! [`WalEntry::Switched`], and everything that belonged to the old set's views is
//! dropped — view and view-change state, the slot, the prepared certificate, the
//! buffered future messages, the checkpoint votes above the stable one and what it
//! knew of the peers' heights (ids may name other replicas now). The new set starts
//! in view 0 at the next sequence number. Pending requests and the decided requests
//! stay: they are the same requests whatever set orders them.
//!
//! A replica that is not a member of the set in force (`id` none: it left, or it joins
//! at a later set) only follows: it answers state-transfer requests and heartbeats
//! tell it whom to ask, but it sends no heartbeat, vote, proposal, view change or
//! checkpoint vote, takes no client request and runs no timer.

use std::collections::BTreeMap;

use super::{Carry, Replica, Slot, Status, SyncState};
use crate::app::Application;
use crate::membership::Membership;
use crate::types::Seq;
use crate::wal::WalEntry;

impl<A: Application> Replica<A> {
    /// The epoch of the replica set this replica works in.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The decision that started the current set (0 for the first set).
    pub fn epoch_start(&self) -> Seq {
        self.epoch_start
    }

    /// True iff this replica is a member of the set in force.
    pub fn is_member(&self) -> bool {
        self.cfg.id < self.cfg.n
    }

    /// After the application state changed through decision (or snapshot) `seq`:
    /// switches to the application's set if it moved on. Returns whether it switched.
    pub(super) fn follow_membership(&mut self, seq: Seq) -> bool {
        if self.app.epoch() == self.epoch {
            return false;
        }
        let Some(m) = self.app.membership() else {
            return false;
        };
        self.adopt(m);
        self.persist(WalEntry::Switched {
            seq,
            epoch: self.epoch,
        });
        self.reset_views(seq);
        true
    }

    /// Takes the set's keys, ids and cluster id.
    pub(super) fn adopt(&mut self, m: Membership) {
        let n = m.n.max(1);
        self.epoch = m.epoch;
        self.cfg.chain = m.chain;
        self.cfg.n = n;
        // Not a member: an id no member has, so nothing is ever taken for its own.
        self.cfg.id = match (m.id, &m.signer) {
            (Some(id), Some(_)) if id < n => id,
            _ => n,
        };
        self.quorum = self.cfg.quorum();
        self.verifier = m.verifier;
        if let Some(signer) = m.signer {
            self.signer = signer;
        }
    }

    /// Drops what belonged to the old set's views: the new set starts in view 0 with
    /// decision `seq` behind it.
    pub(super) fn reset_views(&mut self, seq: Seq) {
        self.epoch_start = seq;
        self.view = 0;
        self.status = Status::Normal;
        self.new_view_proof = None;
        self.nv_sent = BTreeMap::new();
        self.carry = Carry {
            decided: 0,
            proposal: None,
        };
        self.vc_deadline = None;
        self.backoff = 0;
        self.view_since = self.now;
        self.last_complaint = None;
        self.view_changes = BTreeMap::new();
        // Certificates of the old set do not verify in the new one: view changes of the
        // new set prove no decision until it decides one.
        self.last_commit = None;
        self.slot = Slot::default();
        self.prepared = None;
        self.future = BTreeMap::new();
        self.checkpoints.forget_votes();
        self.sync = SyncState::default();
        self.last_leader_heard = self.now;
        self.pending.rebase(self.now);
    }
}
