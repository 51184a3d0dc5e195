//! Switching replica sets at a decision (docs/bft.md "Reconfiguration").
//!
//! After every change of the application state (a decision applied, a snapshot
//! installed) the replica compares the application's [`Application::epoch`] with its
//! own. When the application moved on, the replica takes the new set from
//! [`Application::membership`] and switches before it delivers the decision: its
//! cluster id, members, quorum, keys and own id become the new set's, it persists
//! [`WalEntry::Switched`], and everything that belonged to the old set's views is
//! dropped — view and view-change state, the slot, the prepared certificate, the
//! buffered future messages, the checkpoint votes above the stable one and what it
//! knew of the peers' heights (ids may name other replicas now). The new set starts
//! in view 0 at the next sequence number. Pending requests and the decided requests
//! stay: they are the same requests whatever set orders them.
//!
//! A replica that fell behind an older set catches up by decisions (each certified by
//! the set in force when it was decided) or, when its peers pruned them, by a stable
//! checkpoint of the new set sent with the decisions that switched sets in between:
//! it checks each with the set before it and reads the next set from it
//! ([`Application::membership_from`]) until it reaches the checkpoint's set.
//!
//! Ids are stable: a replica keeps its id in every set, a set is the sorted list of its
//! members' ids ([`Members`]) and a removed id is never given again, so a message's
//! sender means the same replica in every set; only members' messages count.
//!
//! A replica that is not a member of the set in force (it left, or it joins at a later
//! set) only follows: it answers state-transfer requests and heartbeats
//! tell it whom to ask, but it sends no heartbeat, vote, proposal, view change or
//! checkpoint vote, takes no client request and runs no timer.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Carry, Replica, Slot, Status, SyncState, counters};
use crate::app::Application;
use crate::certificate::{Decision, verify_decision};
use crate::checkpoint::StableCheckpoint;
use crate::membership::{Membership, set_chain};
use crate::types::{Members, ReplicaId, Seq};
use crate::wal::WalEntry;

/// Switch decisions a replica keeps to prove the switches to replicas of older sets: a
/// replica more switches behind than this catches up only by decisions.
pub const MAX_SWITCH_PROOFS: usize = 16;

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
        self.cfg.members.contains(self.cfg.id)
    }

    /// The members of the set in force.
    pub fn members(&self) -> &Members {
        &self.cfg.members
    }

    /// The decisions that switched sets, kept to prove the switches to replicas of
    /// older sets (at most [`MAX_SWITCH_PROOFS`], the latest).
    pub fn switch_proofs(&self) -> impl Iterator<Item = &Arc<Decision>> {
        self.switches.iter().map(|s| &s.decision)
    }

    /// After the application applied `decision`: switches to the application's set if
    /// it moved on. Returns whether it switched.
    pub(super) fn follow_membership(&mut self, decision: &Arc<Decision>) -> bool {
        if self.app.epoch() == self.epoch {
            return false;
        }
        let Some(m) = self.app.membership() else {
            return false;
        };
        self.adopt(m);
        self.record_switch(decision.clone());
        self.reset_views(decision.seq());
        // The requests waiting here were verified under the old config: one that no
        // longer verifies (a BAF signed with a key the new config rotated out) would make
        // every proposal holding it refused, and no proposal would be accepted again.
        let app = &mut self.app;
        self.pending.retain(|request| app.verify_request(request));
        true
    }

    /// Persists and keeps the decision that switched to the current set.
    fn record_switch(&mut self, decision: Arc<Decision>) {
        self.persist(WalEntry::Switched {
            epoch: self.epoch,
            members: self.cfg.members.clone(),
            decision: decision.clone(),
        });
        self.keep_switch(self.epoch, self.cfg.members.clone(), decision);
    }

    /// Keeps a switch decision (to the set `members` of `epoch`) as a proof for
    /// replicas of older sets.
    pub(super) fn keep_switch(&mut self, epoch: u64, members: Members, decision: Arc<Decision>) {
        self.switches.push_back(super::SwitchProof {
            epoch,
            members,
            decision,
        });
        while self.switches.len() > MAX_SWITCH_PROOFS {
            self.switches.pop_front();
        }
    }

    /// The switch decisions to send with stable checkpoint `cp` to a replica that
    /// asked for decisions from `from_seq`: all of them or none, within the
    /// state-transfer budget (`sync_max_bytes` with the checkpoint). Without them a
    /// replica of an older set cannot check the checkpoint; with part of them neither.
    pub(super) fn switches_for(&self, from_seq: Seq, cp: &StableCheckpoint) -> Vec<Arc<Decision>> {
        let switches: Vec<Arc<Decision>> = self
            .switches
            .iter()
            .map(|s| &s.decision)
            .filter(|d| d.seq() >= from_seq && d.seq() < cp.seq)
            .cloned()
            .collect();
        let bytes = switches
            .iter()
            .map(|d| super::decision_bytes(d))
            .fold(cp.approx_bytes(), usize::saturating_add);
        if bytes > self.cfg.sync_max_bytes {
            return Vec::new();
        }
        switches
    }

    /// Checks stable checkpoint `cp` against the current set or, through `switches`
    /// (each certified by the set before it, the next set read from the decision by
    /// [`Application::membership_from`]), against a later one. `None` if anything
    /// does not verify; otherwise the sets crossed, in order.
    pub(super) fn verify_across(
        &mut self,
        cp: &StableCheckpoint,
        switches: &[Arc<Decision>],
    ) -> Option<Vec<(Membership, Arc<Decision>)>> {
        let next = self.next_seq();
        let mut chain = self.cfg.chain;
        let mut verifier = self.verifier.clone();
        let mut members = self.cfg.members.clone();
        let mut epoch = self.epoch;
        let mut crossed: Vec<(Membership, Arc<Decision>)> = Vec::new();
        let mut last_seq = self.last_decided;
        for d in switches {
            if d.seq() < next {
                continue;
            }
            if d.seq() <= last_seq || d.seq() >= cp.seq || d.proposal.instance != self.cfg.instance {
                return None;
            }
            last_seq = d.seq();
            verify_decision(d, &chain, verifier.as_ref(), &members).ok()?;
            let m = self.app.membership_from(d, epoch.checked_add(1)?)?;
            if m.epoch != epoch + 1 {
                return None;
            }
            chain = set_chain(m.chain, m.epoch);
            verifier = m.verifier.clone();
            members = m.members.clone();
            epoch = m.epoch;
            crossed.push((m, d.clone()));
        }
        cp.verify(&chain, verifier.as_ref(), &members).ok()?;
        Some(crossed)
    }

    /// Switches through the sets `crossed` on the way to a stable checkpoint (each
    /// switch kept as a proof); the last one is the set in force. The switches reach
    /// the WAL restated by the checkpoint's entry, in the same record: a crash cannot
    /// leave a switch durable without the state it belongs to.
    pub(super) fn cross(&mut self, crossed: Vec<(Membership, Arc<Decision>)>) {
        let mut start = None;
        for (m, d) in crossed {
            start = Some(d.seq());
            self.adopt(m);
            self.keep_switch(self.epoch, self.cfg.members.clone(), d);
        }
        if let Some(seq) = start {
            self.reset_views(seq);
        }
    }

    /// A peer whose message shows (by its own, unverified, claim) that it has not
    /// decided the decision that started this set is in the old set: nothing this set
    /// signs verifies there, and a replica of this set that is changing views sends no
    /// heartbeat. Such a peer is told this replica's height directly, at most once per
    /// heartbeat interval, so that it asks for the decisions it lacks.
    pub(super) fn tell_straggler(&mut self, peer: crate::ReplicaId, msg: &crate::Message) {
        let claimed = match msg {
            crate::Message::Heartbeat { last_decided, .. } => *last_decided,
            crate::Message::Vote(vote) => vote.seq.saturating_sub(1),
            crate::Message::ViewChange(vc) => vc.decided_seq(),
            _ => return,
        };
        if self.epoch_start == 0 || claimed >= self.epoch_start {
            return;
        }
        // Until this set decides, its own members' view changes prove no height either:
        // one that verifies here is a member's, not a straggler's.
        if let crate::Message::ViewChange(vc) = msg
            && vc
                .verify(&self.cfg.chain, self.verifier.as_ref(), &self.cfg.members)
                .is_ok()
        {
            return;
        }
        let due = self
            .told
            .get(&peer)
            .is_none_or(|t| self.now.saturating_sub(*t) >= self.cfg.heartbeat_interval_ms);
        if due {
            self.told.insert(peer, self.now);
            let msg = crate::Message::Heartbeat {
                instance: self.cfg.instance,
                view: self.view,
                last_decided: self.last_decided,
            };
            self.send(peer, msg);
        }
    }

    /// A non-member sends no heartbeats, so a set whose members are all changing views
    /// (they send none either) would never tell it their height — and may need it to
    /// reach a quorum once it switched. Each heartbeat interval without a state transfer
    /// under way, it asks the next replica of its set (round robin) for the decisions
    /// after its own; one that has none does not answer.
    pub(super) fn poll_as_follower(&mut self) {
        self.maybe_sync();
        if self.sync.outstanding.is_some() || self.now < self.next_heartbeat {
            return;
        }
        self.next_heartbeat = self.now + self.cfg.heartbeat_interval_ms;
        let next = self.cfg.members.after(self.sync.last_asked).next();
        if let Some(peer) = next {
            self.ask_for_decisions(peer);
        }
    }

    /// Takes the set's keys, ids and cluster id.
    pub(super) fn adopt(&mut self, m: Membership) {
        let member = m.is_member();
        self.epoch = m.epoch;
        self.cfg.chain = set_chain(m.chain, m.epoch);
        self.cfg.id = own_id(&m, member, self.cfg.id);
        self.cfg.members = m.members;
        self.quorum = self.cfg.quorum();
        if let Some(params) = m.params {
            self.cfg.set_params(params);
        }
        self.verifier = counters::CountingVerifier::wrap(m.verifier, &self.signatures);
        if let Some(signer) = m.signer {
            self.signer = counters::CountingSigner::wrap(signer, &self.signatures);
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
            decided: seq,
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
        self.told = BTreeMap::new();
        self.heard_view = None;
        self.last_leader_heard = self.now;
        self.pending.rebase(self.now);
    }
}

/// This replica's id in the set `m` names: its stable id if the set lists it with a
/// signer (`member`) or does not list it at all; otherwise (the application named no id,
/// or a listed id without a signer) its current id if the set does not list that, else
/// an id above every member, so that a non-member never takes a member's messages for
/// its own.
fn own_id(m: &Membership, member: bool, current: ReplicaId) -> ReplicaId {
    match m.id {
        Some(id) if member || !m.members.contains(id) => id,
        _ if !m.members.contains(current) => current,
        _ => m.members.max_id().saturating_add(1),
    }
}
