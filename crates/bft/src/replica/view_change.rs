//! View change (PBFT §4.4 with the liveness rules of §4.5.2).
//!
//! * A replica complains — asks for view `v+1` — when the leader is silent past the
//!   heartbeat timeout, a request waits past the request timeout (censorship), the
//!   slot does not decide in time, or the leader's proposal fails verification or
//!   equivocates.
//! * The signed view change carries the sender's last decision certificate and its
//!   prepared certificate above it. It is persisted before it is sent: the replica
//!   never again acts in a lower view.
//! * `f+1` view changes for higher views make a replica join the smallest of them.
//! * The timer for moving on to `target+1` only starts once a quorum asked for
//!   `target`, with a doubling timeout, so correct replicas converge on one view.
//! * The new leader broadcasts a quorum of view changes as the new-view proof; every
//!   replica derives from it the same [`Carry`]: the highest proven decision `h` and
//!   the highest-view prepared proposal at `h+1`, which the leader must re-propose.

use std::sync::Arc;

use super::{Complaint, Output, Replica, Slot, Status};
use crate::app::Application;
use crate::certificate::{Decision, verify_decision};
use crate::messages::{Message, NewView, ViewChange};
use crate::types::{ReplicaId, View};
use crate::wal::WalEntry;

impl<A: Application> Replica<A> {
    /// The highest view this replica has installed or asked for.
    pub(super) fn level(&self) -> View {
        match self.status {
            Status::Normal => self.view,
            Status::ViewChanging { target } => target,
        }
    }

    /// Suspect the leader: ask for the next view.
    pub(super) fn complain(&mut self, reason: Complaint) {
        self.start_view_change(self.level() + 1, reason);
    }

    pub(super) fn start_view_change(&mut self, target: View, reason: Complaint) {
        if target <= self.level() {
            return;
        }
        self.persist(WalEntry::ViewChange { target });
        if self.status == Status::Normal {
            // A new view change: what the others were heard in belongs to the last one.
            self.heard_view = None;
        }
        self.status = Status::ViewChanging { target };
        self.last_complaint = Some((target, reason));
        self.backoff = self.backoff.saturating_add(1);
        self.vc_deadline = None;
        self.slot = Slot::default();
        self.broadcast_view_change();
        self.check_view_change_quorum();
    }

    /// (Re)builds, records and broadcasts this replica's view change for its target.
    pub(super) fn broadcast_view_change(&mut self) {
        let Status::ViewChanging { target } = self.status else {
            return;
        };
        let last_decided = self.last_commit.clone();
        let next = self.next_seq();
        let prepared = self.prepared.clone().filter(|p| p.certificate.seq == next);
        let bytes = ViewChange::signed_bytes(
            &self.cfg.chain,
            self.cfg.instance,
            self.cfg.id,
            target,
            last_decided.as_ref(),
            prepared.as_ref(),
        );
        let vc = Arc::new(ViewChange {
            instance: self.cfg.instance,
            from: self.cfg.id,
            target,
            last_decided,
            prepared,
            signature: self.signer.sign(&bytes),
        });
        self.view_changes.insert(self.cfg.id, vc.clone());
        self.broadcast(Message::ViewChange(vc));
    }

    pub(super) fn on_view_change(&mut self, from: ReplicaId, vc: Arc<ViewChange>) {
        if vc.from != from {
            return;
        }
        if vc.target <= self.view {
            // A straggler: show it the proof of the view we are in.
            self.pull_forward(from);
            return;
        }
        if self
            .view_changes
            .get(&from)
            .is_some_and(|old| old.target > vc.target || **old == *vc)
        {
            return;
        }
        if vc
            .verify(&self.cfg.chain, self.verifier.as_ref(), &self.cfg.members)
            .is_err()
        {
            return;
        }
        self.note_height(from, vc.decided_seq());
        self.view_changes.insert(from, vc);
        self.apply_join_rule();
        self.check_view_change_quorum();
    }

    /// PBFT §4.5.2: `f+1` replicas asking for higher views prove a correct one did;
    /// join the smallest such view.
    fn apply_join_rule(&mut self) {
        let level = self.level();
        let mut higher: Vec<View> = self
            .view_changes
            .iter()
            .filter(|(id, vc)| **id != self.cfg.id && vc.target > level)
            .map(|(_, vc)| vc.target)
            .collect();
        if higher.len() as u32 > self.quorum.f {
            higher.sort_unstable();
            self.start_view_change(higher[0], Complaint::Joined);
        }
    }

    /// With a quorum for our target: start the escalation timer, and if we lead the
    /// target view, broadcast the new-view proof and install it.
    fn check_view_change_quorum(&mut self) {
        let Status::ViewChanging { target } = self.status else {
            return;
        };
        // A quorum at `target` or beyond: waiting longer at `target` cannot help if
        // its leader fails, so start the escalation timer.
        let at_or_beyond = self
            .view_changes
            .values()
            .filter(|vc| vc.target >= target)
            .count();
        if at_or_beyond as u32 >= self.quorum.q && self.vc_deadline.is_none() {
            // Doubles per view change since the last decision (the first one waits the
            // base timeout).
            let timeout = self.backed_off(self.cfg.view_change_timeout_ms) / 2;
            self.vc_deadline = Some(
                self.now
                    .saturating_add(timeout.max(self.cfg.view_change_timeout_ms)),
            );
        }
        let vcs: Vec<Arc<ViewChange>> = self
            .view_changes
            .values()
            .filter(|vc| vc.target == target)
            .take(self.quorum.q as usize)
            .cloned()
            .collect();
        if (vcs.len() as u32) < self.quorum.q {
            return;
        }
        if self.cfg.leader(target) == self.cfg.id {
            let nv = Arc::new(NewView {
                instance: self.cfg.instance,
                view: target,
                view_changes: vcs,
            });
            self.broadcast(Message::NewView(nv.clone()));
            self.install_view(nv);
        }
    }

    pub(super) fn on_new_view(&mut self, _from: ReplicaId, nv: Arc<NewView>) {
        let acceptable = match self.status {
            Status::Normal => nv.view > self.view,
            Status::ViewChanging { target } => nv.view >= target,
        };
        if !acceptable
            || nv
                .verify(&self.cfg.chain, self.verifier.as_ref(), &self.cfg.members)
                .is_err()
        {
            return;
        }
        self.install_view(nv);
    }

    /// Enters the view proven by `nv` (persisted first, with its obligations).
    fn install_view(&mut self, nv: Arc<NewView>) {
        let carry = nv.carry(self.epoch_start);
        self.persist(WalEntry::NewView {
            view: nv.view,
            decided: carry.decided,
            carried: carry.proposal.clone(),
        });
        self.view = nv.view;
        self.status = Status::Normal;
        self.vc_deadline = None;
        self.slot = Slot::default();
        for vc in &nv.view_changes {
            self.note_height(vc.from, vc.decided_seq());
        }
        self.carry = carry;
        self.new_view_proof = Some(nv);
        let view = self.view;
        self.view_changes.retain(|_, vc| vc.target > view);
        self.last_leader_heard = self.now;
        self.view_since = self.now;
        self.pending.rebase(self.now);
        self.out.push(Output::ViewInstalled {
            view,
            leader: self.cfg.leader(view),
        });
        if let Some(nv) = self.new_view_proof.clone() {
            self.decide_from_proof(&nv);
        }
        self.replay_future();
        self.maybe_propose();
        self.maybe_sync();
    }

    /// Decides what the new-view proof itself proves: a commit certificate for the next
    /// sequence (from one view change) whose proposal another view change carries as
    /// prepared, with the same digest, is a complete decision. Without this, a height
    /// proven only by a replica that then refuses state transfer would block the leader
    /// (it must not propose below the proven height) in every view.
    fn decide_from_proof(&mut self, nv: &NewView) {
        loop {
            let next = self.next_seq();
            let Some(certificate) = nv
                .view_changes
                .iter()
                .filter_map(|vc| vc.last_decided.as_ref())
                .find(|c| c.seq == next)
            else {
                return;
            };
            let Some(proposal) = nv
                .view_changes
                .iter()
                .filter_map(|vc| vc.prepared.as_ref())
                .map(|p| &p.proposal)
                .find(|p| p.seq == next && p.digest() == certificate.digest)
            else {
                return;
            };
            let decision = Arc::new(Decision {
                proposal: proposal.clone(),
                certificate: certificate.clone(),
            });
            if decision.proposal.instance != self.cfg.instance
                || verify_decision(
                    &decision,
                    &self.cfg.chain,
                    self.verifier.as_ref(),
                    &self.cfg.members,
                )
                .is_err()
            {
                return;
            }
            self.decide(decision);
        }
    }
}
