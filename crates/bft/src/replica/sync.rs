//! Heartbeats, retransmission and state transfer.
//!
//! Every replica broadcasts a heartbeat `(view, last_decided)` each interval; the
//! leader's heartbeats keep followers from suspecting it. With each heartbeat a replica
//! also retransmits its in-flight traffic (its pre-prepare, votes, or view change), so
//! messages lost before the network stabilises are eventually delivered.
//!
//! A replica that learns (from a heartbeat, a view change, a new-view proof, or a
//! commit quorum it cannot decide locally) that a peer holds decisions it lacks asks
//! one such peer at a time for them; it checks every decision's certificate
//! ([`crate::verify_decision`]) before applying it, so a lying peer can only waste a
//! round trip (its claimed height is then forgotten and another peer is asked). A peer
//! that pruned the decisions asked for answers with its stable checkpoint instead
//! (`checkpoint.rs`).

use std::sync::Arc;

use super::{Replica, Status};
use crate::app::Application;
use crate::certificate::{Decision, Phase, verify_decision};
use crate::messages::Message;
use crate::types::{ReplicaId, Seq, View};

impl<A: Application> Replica<A> {
    pub(super) fn send_heartbeat(&mut self) {
        // A replica that left its view no longer vouches for it: a leader that suspects
        // itself (its own backlog timed out) falls silent, so the followers' heartbeat
        // timers join its view change even when they hold none of its requests.
        if self.status == Status::Normal {
            self.broadcast(Message::Heartbeat {
                instance: self.cfg.instance,
                view: self.view,
                last_decided: self.last_decided(),
            });
        }
        match self.status {
            Status::ViewChanging { .. } => {
                self.broadcast_view_change();
                self.resend_pending();
            }
            Status::Normal => {
                self.retransmit_pre_prepare();
                self.broadcast_my_votes_from(0);
            }
        }
    }

    /// While changing views, caught up, and told by a member's heartbeat that the others
    /// sit in a lower view: forwards the requests it holds to that view's leader, each at
    /// most once per (backed-off) request timeout and at most `sync_max_bytes` per
    /// heartbeat. A replica alone in a view change waits for the others to join it, and
    /// they complain only about requests they hold: when its one forward to the old
    /// leader was lost, or that leader had left the set, nobody else ever holds them and
    /// nothing moves. With them, that leader orders them, or the others' timers bring
    /// them to the view change. Not while a peer claims decisions this replica lacks:
    /// what it holds may be decided already, and its link is for catching up.
    fn resend_pending(&mut self) {
        let Some(view) = self.heard_view else {
            return;
        };
        let last = self.last_decided();
        if self.sync.outstanding.is_some() || self.sync.peer_heights.values().any(|h| *h > last) {
            return;
        }
        let leader = self.cfg.leader(view);
        let every = self.backed_off(self.cfg.request_timeout_ms).max(1);
        let requests = self
            .pending
            .take_for_resend(self.now, every, self.cfg.sync_max_bytes);
        let instance = self.cfg.instance;
        for request in requests {
            self.send(leader, Message::Forward { instance, request });
        }
    }

    /// Leader: re-sends the in-flight proposal only to the replicas that have not voted
    /// for anything in the slot (a vote shows the proposal arrived), so a large
    /// proposal is not sent again to everyone with every heartbeat.
    fn retransmit_pre_prepare(&mut self) {
        let Some(accepted) = self.slot.accepted.as_ref().filter(|_| self.is_leader()) else {
            return;
        };
        let msg = Message::PrePrepare {
            view: self.view,
            proposal: accepted.proposal.clone(),
        };
        let missing: Vec<ReplicaId> = self
            .cfg
            .members
            .ids()
            .iter()
            .copied()
            .filter(|p| *p != self.cfg.id && !self.slot.voted.keys().any(|(v, _)| v == p))
            .collect();
        for p in missing {
            self.send(p, msg.clone());
        }
    }

    /// Sends the current new-view proof to a replica in a lower view, at most once per
    /// heartbeat timeout per replica (the proof carries up to a quorum of proposals).
    pub(super) fn pull_forward(&mut self, peer: ReplicaId) {
        let Some(nv) = self.new_view_proof.clone() else {
            return;
        };
        let due = self
            .nv_sent
            .get(&peer)
            .is_none_or(|t| self.now.saturating_sub(*t) >= self.cfg.heartbeat_timeout_ms);
        if due {
            self.nv_sent.insert(peer, self.now);
            self.send(peer, Message::NewView(nv));
        }
    }

    /// A member's vote stands for a heartbeat: its sender works in the vote's view and
    /// decided up to the sequence before the vote's (a replica votes only in the slot
    /// after its last decision). Votes replace the heartbeats of a replica that votes
    /// (`broadcast_fresh_votes`), so they must be heard as such.
    pub(super) fn on_vote_heard(&mut self, from: ReplicaId, vote: &crate::messages::Vote) {
        self.on_heartbeat(from, vote.view, vote.seq.saturating_sub(1));
    }

    pub(super) fn on_heartbeat(&mut self, from: ReplicaId, view: View, last_decided: Seq) {
        if view == self.view && from == self.cfg.leader(view) {
            self.last_leader_heard = self.now;
        }
        if let Status::ViewChanging { target } = self.status
            && view < target
        {
            self.heard_view = Some(self.heard_view.map_or(view, |v| v.max(view)));
        }
        if view < self.view {
            self.pull_forward(from);
        }
        self.note_height(from, last_decided);
    }

    /// Records that `peer` has (or claims) decisions up to `height`.
    pub(super) fn note_height(&mut self, peer: ReplicaId, height: Seq) {
        if peer == self.cfg.id {
            return;
        }
        let h = self.sync.peer_heights.entry(peer).or_default();
        *h = (*h).max(height);
        if height >= self.next_seq() {
            self.maybe_sync();
        }
    }

    /// The commit quorum we saw without the proposal: its voters hold it.
    pub(super) fn mark_peers_ahead(&mut self) {
        let next = self.next_seq();
        let voters: Vec<ReplicaId> = self
            .slot
            .votes
            .iter()
            .filter(|((phase, _), _)| *phase == Phase::Commit)
            .flat_map(|(_, v)| v.keys().copied())
            .collect();
        for v in voters {
            self.note_height(v, next);
        }
    }

    /// Asks the next peer (round robin) that is ahead of us, one request at a time.
    pub(super) fn maybe_sync(&mut self) {
        if let Some((peer, deadline)) = self.sync.outstanding {
            if self.now < deadline {
                return;
            }
            // No answer in time: forget what the peer claimed (a crashed peer would
            // otherwise be asked forever); it tells us again if it is alive and ahead.
            self.sync.outstanding = None;
            let mine = self.last_decided;
            self.sync.peer_heights.insert(peer, mine);
        }
        let next = self.next_seq();
        let ahead = self.cfg.members.after(self.sync.last_asked).find(|peer| {
            *peer != self.cfg.id && self.sync.peer_heights.get(peer).is_some_and(|h| *h >= next)
        });
        if let Some(peer) = ahead {
            self.ask_for_decisions(peer);
        }
    }

    /// Asks `peer` for the decisions after ours: the one outstanding request, until it is
    /// answered or a heartbeat timeout passes (then the next peer ahead is asked). The
    /// answer of a peer asked earlier is still read when it comes later (`unanswered`):
    /// a replica changing views rebroadcasts its view change (a prepared proposal in it)
    /// every heartbeat, and on a slow link its request can wait behind that longer than
    /// a heartbeat timeout, so every answer came after the next peer was asked and was
    /// dropped, forever (simulation seed 2000001546, once votes stood in for heartbeats).
    pub(super) fn ask_for_decisions(&mut self, peer: ReplicaId) {
        self.sync.last_asked = peer;
        self.sync.unanswered.insert(peer);
        self.sync.outstanding = Some((peer, self.now + self.cfg.heartbeat_timeout_ms));
        let instance = self.cfg.instance;
        let from_seq = self.next_seq();
        self.send(peer, Message::SyncRequest { instance, from_seq });
    }

    pub(super) fn on_sync_request(&mut self, from: ReplicaId, from_seq: Seq) {
        if from_seq == 0 || from_seq > self.last_decided() {
            return;
        }
        if let Some(cp) = self.snapshot_for(from_seq) {
            let switches = self.switches_for(from_seq, &cp);
            self.send(
                from,
                Message::SyncSnapshot {
                    checkpoint: cp,
                    switches,
                },
            );
            return;
        }
        // Bounded by count and by bytes (`sync_max_bytes`, kept below the transport's
        // message limit); at least one decision, so a laggard always makes progress.
        let first = self.decisions.front().map_or(from_seq, |d| d.seq());
        let start = usize::try_from(from_seq.saturating_sub(first)).unwrap_or(usize::MAX);
        let mut decisions = Vec::new();
        let mut bytes = 0usize;
        for d in self.decisions.iter().skip(start).take(self.cfg.sync_batch.get()) {
            let size = super::decision_bytes(d);
            if !decisions.is_empty() && bytes.saturating_add(size) > self.cfg.sync_max_bytes {
                break;
            }
            bytes = bytes.saturating_add(size);
            decisions.push(d.clone());
        }
        let instance = self.cfg.instance;
        self.send(from, Message::SyncResponse { instance, decisions });
    }

    pub(super) fn on_sync_response(&mut self, from: ReplicaId, decisions: Vec<Arc<Decision>>) {
        self.sync.unanswered.remove(&from);
        if self.sync.outstanding.is_some_and(|(p, _)| p == from) {
            self.sync.outstanding = None;
        }
        let mut progressed = false;
        for d in decisions {
            let next = self.next_seq();
            if d.seq() < next {
                continue;
            }
            if d.seq() > next
                || d.proposal.instance != self.cfg.instance
                || verify_decision(&d, &self.cfg.chain, self.verifier.as_ref(), &self.cfg.members).is_err()
            {
                break;
            }
            self.decide(d);
            progressed = true;
        }
        if !progressed {
            // Forget what the peer claimed; it will tell us again if it gets ahead.
            let mine = self.last_decided();
            self.sync.peer_heights.insert(from, mine);
        }
        self.maybe_sync();
    }
}
