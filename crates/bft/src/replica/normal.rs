//! Normal-case operation (PBFT §4.2, one sequence number at a time as in SmartBFT):
//! the leader batches pending requests into a pre-prepare; every replica that accepts
//! it persists it and broadcasts a signed prepare; a quorum of prepares makes the
//! proposal *prepared* (persisted, then a signed commit is broadcast); a quorum of
//! commits decides it, and the commit signatures become the decision certificate.

use std::collections::HashSet;
use std::sync::Arc;

use super::{Complaint, Output, Refusal, Replica, Slot, Status};
use crate::app::{Application, ProposalContext};
use crate::certificate::{Certificate, Decision, Phase, Prepared, vote_bytes};
use crate::messages::{Message, Vote};
use crate::types::{Digest, Proposal, Proposed, ReplicaId, View};
use crate::wal::WalEntry;

impl<A: Application> Replica<A> {
    /// A client request (or one forwarded by a peer) enters the pending pool; a
    /// follower forwards client requests to the leader (SmartBFT request forwarding).
    /// Admission is by count and by bytes (`max_pending`, `max_pending_bytes`); a
    /// client request that is not admitted is answered with [`Output::Refused`].
    pub(super) fn on_request(&mut self, request: Vec<u8>, from_client: bool) {
        let d = Digest::of_request(&request);
        if self.pending.contains(&d) {
            return;
        }
        let refusal = if self.decided_requests.contains(&d) {
            Some(Refusal::AlreadyDecided)
        } else if !self.is_member() {
            Some(Refusal::NotMember)
        } else if request.len() > self.cfg.max_request_bytes {
            Some(Refusal::TooLarge)
        } else if self.pending.len() >= self.cfg.max_pending
            || self.pending.bytes().saturating_add(request.len()) > self.cfg.max_pending_bytes
        {
            Some(Refusal::PoolFull)
        } else if !self.app.verify_request(&request) {
            Some(Refusal::Invalid)
        } else {
            None
        };
        if let Some(reason) = refusal {
            if from_client {
                self.out.push(Output::Refused { request: d, reason });
            }
            return;
        }
        let forward = from_client && !self.is_leader() && self.status == Status::Normal;
        let forward_at = forward.then(|| self.now.saturating_add(self.forward_delay()));
        self.pending.insert(d, request, self.now, forward_at);
        self.maybe_propose();
    }

    /// How long a follower holds a client request before forwarding it to the leader:
    /// two batch intervals, at most a quarter of the request timeout. A client that
    /// submits to every replica (the Arma batchers send each BAF to every consenter)
    /// has its request at the leader already, which proposes it within a batch
    /// interval: by then the followers decided it and forward nothing. A request only
    /// a follower holds reaches the leader that much later (docs/bft.md "What a
    /// decision costs").
    pub(super) fn forward_delay(&self) -> u64 {
        self.cfg
            .batch_interval_ms
            .saturating_mul(2)
            .min(self.cfg.request_timeout_ms / 4)
    }

    /// Follower: forwards the client requests whose first forward is due and that are
    /// still pending (a leader drops its due entries: it proposes what it holds).
    fn forward_due(&mut self) {
        let due = self.pending.take_due_forwards(self.now);
        if self.is_leader() {
            return;
        }
        let leader = self.cfg.leader(self.view);
        let instance = self.cfg.instance;
        for request in due {
            self.send(leader, Message::Forward { instance, request });
        }
    }

    /// Leader: proposes the next sequence number when the slot is free and either the
    /// new view obliges it to re-propose a carried proposal or a batch is due.
    pub(super) fn maybe_propose(&mut self) {
        if self.status != Status::Normal || !self.is_leader() || self.slot.accepted.is_some() {
            return;
        }
        let seq = self.next_seq();
        if self.carry.decided >= seq {
            return; // behind the new view's proven height: sync first
        }
        let proposal = match &self.carry.proposal {
            Some(p) if p.seq == seq => Proposal::clone(p),
            _ => {
                if !self.batch_due() {
                    return;
                }
                let (digests, requests): (Vec<Digest>, Vec<Vec<u8>>) = self
                    .pending
                    .batch(self.cfg.max_batch_count, self.cfg.max_batch_bytes)
                    .into_iter()
                    .unzip();
                self.slot.request_digests = digests;
                let ctx = ProposalContext { seq, view: self.view };
                let metadata = self.app.assemble(ctx, &requests);
                Proposal {
                    instance: self.cfg.instance,
                    seq,
                    requests,
                    metadata,
                }
            }
        };
        let proposed = Proposed::new(proposal);
        let msg = Message::PrePrepare {
            view: self.view,
            proposal: proposed.proposal.clone(),
        };
        self.accept(proposed);
        self.broadcast(msg);
        self.broadcast_fresh_votes(0);
        self.check_slot();
    }

    fn batch_due(&self) -> bool {
        let Some(oldest) = self.pending.oldest_ms() else {
            return false;
        };
        self.pending.len() >= self.cfg.max_batch_count
            || self.pending.bytes() >= self.cfg.max_batch_bytes
            || self.now.saturating_sub(oldest) >= self.cfg.batch_interval_ms
    }

    /// Persists the proposal as accepted in this view and records our own prepare.
    fn accept(&mut self, proposed: Proposed) {
        self.persist(WalEntry::Accepted {
            view: self.view,
            proposal: proposed.proposal.clone(),
        });
        let vote = self.sign_vote(Phase::Prepare, proposed.proposal.seq, proposed.digest);
        self.record_own_vote(&vote);
        self.slot.my_votes.push(vote);
        self.slot.accepted = Some(proposed);
        self.slot.started_ms.get_or_insert(self.now);
    }

    /// Broadcasts this replica's new votes. A vote tells every peer what a heartbeat
    /// would: this replica works in the vote's view and decided up to the sequence
    /// before the vote's (`on_vote_heard`), so the next heartbeat is due one interval
    /// after it (docs/bft.md "What a decision costs"). Retransmissions do not count.
    fn broadcast_fresh_votes(&mut self, first: usize) {
        self.broadcast_my_votes_from(first);
        self.next_heartbeat = self.now.saturating_add(self.cfg.heartbeat_interval_ms);
    }

    pub(super) fn broadcast_my_votes_from(&mut self, first: usize) {
        let votes: Vec<Vote> = self.slot.my_votes[first..].to_vec();
        for v in votes {
            self.broadcast(Message::Vote(v));
        }
    }

    pub(super) fn on_pre_prepare(&mut self, from: ReplicaId, view: View, proposal: Arc<Proposal>) {
        let seq = self.next_seq();
        if view < self.view || proposal.seq < seq {
            return;
        }
        if view > self.view || proposal.seq > seq || self.status != Status::Normal {
            self.buffer_future(from, Message::PrePrepare { view, proposal });
            return;
        }
        if from != self.cfg.leader(view) {
            return;
        }
        let proposed = Proposed {
            digest: proposal.digest(),
            proposal,
        };
        if let Some(accepted) = &self.slot.accepted {
            if accepted.digest != proposed.digest {
                // Equivocating leader: two proposals for one (view, seq).
                self.complain(Complaint::Equivocation);
            }
            return;
        }
        if self.carry.decided >= seq {
            return; // the new view proved a higher decision: sync first
        }
        if !self.proposal_acceptable(&proposed) {
            self.complain(Complaint::BadProposal);
            return;
        }
        self.accept(proposed);
        self.broadcast_fresh_votes(self.slot.my_votes.len() - 1);
        self.check_slot();
    }

    /// A follower's checks of a proposal: the carried proposal if the new view
    /// obliges one, otherwise a well-formed batch the application accepts.
    fn proposal_acceptable(&mut self, p: &Proposed) -> bool {
        if let Some(carried) = &self.carry.proposal
            && carried.seq == p.proposal.seq
        {
            return **carried == *p.proposal;
        }
        let proposal = &p.proposal;
        if proposal.requests.is_empty()
            || proposal.requests.len() > self.cfg.max_batch_count
            || proposal.request_bytes() > self.cfg.max_batch_bytes.max(self.cfg.max_request_bytes)
        {
            return false;
        }
        let mut seen = HashSet::with_capacity(proposal.requests.len());
        let mut digests = Vec::with_capacity(proposal.requests.len());
        for r in &proposal.requests {
            let d = Digest::of_request(r);
            if r.len() > self.cfg.max_request_bytes
                || (self.dedup_proposals && self.decided_requests.contains(&d))
                || !seen.insert(d)
                || !self.app.verify_request(r)
            {
                return false;
            }
            digests.push(d);
        }
        if !self.app.verify_proposal(proposal) {
            return false;
        }
        self.slot.request_digests = digests;
        true
    }

    /// A vote for the slot is kept with its signature unchecked: the signature is
    /// checked when the vote is needed for a certificate (`certificate`), so a replica
    /// checks the `q − 1` peer votes of each certificate and no more, and a repeated
    /// vote (a retransmission) costs nothing. Votes ahead of this replica are buffered
    /// unchecked and checked when they are replayed into their slot. A vote starts the
    /// stuck-slot timer only when this replica accepted the proposal or `f+1` distinct
    /// replicas voted in the slot (the transport authenticates senders, so `f+1` of them
    /// include a correct one): one Byzantine replica's junk vote cannot make an idle
    /// cluster change views.
    pub(super) fn on_vote(&mut self, from: ReplicaId, vote: Vote) {
        let seq = self.next_seq();
        if vote.view < self.view || vote.seq < seq {
            return;
        }
        if vote.view > self.view || vote.seq > seq || self.status != Status::Normal {
            self.buffer_future(from, Message::Vote(vote));
            return;
        }
        if !self.record_vote(from, &vote, false) {
            return;
        }
        let voters: HashSet<ReplicaId> = self.slot.voted.keys().map(|(id, _)| *id).collect();
        if voters.len() as u32 > self.quorum.f {
            self.slot.started_ms.get_or_insert(self.now);
        }
        self.check_slot();
    }

    /// Records this replica's own vote (its signature needs no check).
    pub(super) fn record_own_vote(&mut self, vote: &Vote) {
        self.record_vote(self.cfg.id, vote, true);
    }

    /// Records a replica's first vote of a phase in this slot (later ones are ignored);
    /// false if it already had one.
    fn record_vote(&mut self, from: ReplicaId, vote: &Vote, verified: bool) -> bool {
        if self.slot.voted.contains_key(&(from, vote.phase)) {
            return false;
        }
        self.slot.voted.insert((from, vote.phase), vote.digest);
        self.slot
            .votes
            .entry((vote.phase, vote.digest))
            .or_default()
            .insert(
                from,
                super::HeldVote {
                    signature: vote.signature.clone(),
                    verified,
                },
            );
        true
    }

    /// The certificate of `phase` for `digest` once `q` votes for it hold valid
    /// signatures. Signatures are checked here, lazily: only once `q` votes are held,
    /// and only until `q` are valid. A vote whose signature fails is forgotten, and its
    /// sender may vote again in the slot (as if the bad vote had never arrived; only a
    /// faulty replica sends one, and each costs it one message). The certificate holds
    /// exactly `q` signatures.
    fn certificate(&mut self, phase: Phase, digest: Digest) -> Option<Certificate> {
        let q = self.quorum.q as usize;
        let seq = self.next_seq();
        loop {
            let votes = self.slot.votes.get(&(phase, digest))?;
            if votes.len() < q {
                return None;
            }
            let unchecked = votes
                .iter()
                .find(|(_, v)| !v.verified)
                .map(|(id, v)| (*id, v.signature.clone()));
            let valid = votes.values().filter(|v| v.verified).count();
            let Some((id, signature)) = unchecked.filter(|_| valid < q) else {
                let signatures = votes
                    .iter()
                    .filter(|(_, v)| v.verified)
                    .take(q)
                    .map(|(id, v)| (*id, v.signature.clone()))
                    .collect();
                return Some(Certificate {
                    phase,
                    instance: self.cfg.instance,
                    view: self.view,
                    seq,
                    digest,
                    signatures,
                });
            };
            let bytes = vote_bytes(&self.cfg.chain, phase, self.cfg.instance, self.view, seq, &digest);
            let ok = self.verifier.verify(id, &bytes, &signature);
            let votes = self.slot.votes.entry((phase, digest)).or_default();
            if ok {
                if let Some(v) = votes.get_mut(&id) {
                    v.verified = true;
                }
            } else {
                votes.remove(&id);
                self.slot.voted.remove(&(id, phase));
            }
        }
    }

    /// Moves the slot forward: prepared → send commit; committed → decide.
    pub(super) fn check_slot(&mut self) {
        let Some(accepted) = self.slot.accepted.clone() else {
            let committed: Vec<Digest> = self
                .slot
                .votes
                .keys()
                .filter(|(phase, _)| *phase == Phase::Commit)
                .map(|(_, d)| *d)
                .collect();
            if committed
                .into_iter()
                .any(|d| self.certificate(Phase::Commit, d).is_some())
            {
                // Decided by a quorum but the proposal never reached us: fetch it.
                self.mark_peers_ahead();
            }
            return;
        };
        if !self.slot.sent_commit
            && let Some(certificate) = self.certificate(Phase::Prepare, accepted.digest)
        {
            let prepared = Prepared {
                proposal: accepted.proposal.clone(),
                certificate,
            };
            self.persist(WalEntry::Prepared(prepared.clone()));
            self.prepared = Some(prepared);
            self.slot.sent_commit = true;
            let vote = self.sign_vote(Phase::Commit, accepted.proposal.seq, accepted.digest);
            self.record_own_vote(&vote);
            self.slot.my_votes.push(vote);
            self.broadcast_fresh_votes(self.slot.my_votes.len() - 1);
        }
        if let Some(certificate) = self.certificate(Phase::Commit, accepted.digest) {
            let decision = Decision {
                proposal: accepted.proposal,
                certificate,
            };
            self.decide(Arc::new(decision));
        }
    }

    /// Commits a certified decision for the next sequence number: persist, apply,
    /// deliver, then move on (replay buffered messages, maybe propose).
    pub(super) fn decide(&mut self, decision: Arc<Decision>) {
        debug_assert_eq!(decision.seq(), self.next_seq());
        // Contract (docs/bft.md "Application interface"): `apply` changes only the
        // application's volatile state; the shell executes `Persist(Decided)` before
        // the `Deliver` below, and durable application effects belong to `Deliver`.
        self.persist(WalEntry::Decided(decision.clone()));
        self.app.apply(&decision);
        let switched = self.follow_membership(&decision);
        // Progress resets the backoff once the view has worked for a full (backed-off)
        // request timeout: a view that decides once and then stalls again (a backlog
        // larger than one timeout's worth, a slow link) keeps its longer timeouts.
        if self.now.saturating_sub(self.view_since) >= self.backed_off(self.cfg.request_timeout_ms) {
            self.backoff = 0;
        }
        let known = self
            .slot
            .accepted
            .as_ref()
            .is_some_and(|a| a.digest == decision.certificate.digest)
            && self.slot.request_digests.len() == decision.proposal.requests.len();
        let digests = if known {
            std::mem::take(&mut self.slot.request_digests)
        } else {
            decision
                .proposal
                .requests
                .iter()
                .map(|r| Digest::of_request(r))
                .collect()
        };
        let mut served = None;
        for d in digests {
            if let Some(arrived) = self.pending.remove(&d) {
                served = served.max(Some(arrived));
            }
            self.decided_requests.insert(d);
        }
        self.pending.progress(served, self.now);
        self.last_decided = decision.seq();
        self.last_commit = Some(decision.certificate.clone());
        self.decisions.push_back(decision.clone());
        self.out.push(Output::Deliver(decision));
        self.take_checkpoint();
        self.slot = Slot::default();
        if self
            .prepared
            .as_ref()
            .is_some_and(|p| p.certificate.seq < self.next_seq())
        {
            self.prepared = None;
        }
        self.last_leader_heard = self.now;
        if switched {
            // The decided state was the old set's; the new set's first views start now.
            self.last_commit = None;
        }
        if self.status == Status::Normal {
            self.replay_future();
            self.maybe_propose();
        }
    }

    /// Normal-status timers: leader silence, request censorship, stuck proposal. Each
    /// timeout doubles per view change since the last decision (`backed_off`).
    pub(super) fn check_normal_timers(&mut self) {
        let now = self.now;
        let heartbeat_timeout = self.backed_off(self.cfg.heartbeat_timeout_ms);
        let request_timeout = self.backed_off(self.cfg.request_timeout_ms);
        if !self.is_leader() && now.saturating_sub(self.last_leader_heard) > heartbeat_timeout {
            self.complain(Complaint::LeaderSilent);
            return;
        }
        self.forward_due();
        if let Some((start, arrived)) = self.pending.timer_start() {
            let age = now.saturating_sub(start);
            // However busy the leader, a request waiting this long is complained about.
            let cap = self
                .cfg
                .request_timeout_ms
                .saturating_mul(1 << self.cfg.max_backoff_exponent.min(20));
            if age > request_timeout || now.saturating_sub(arrived) > cap.max(request_timeout) {
                self.complain(Complaint::RequestTimeout);
                return;
            }
            if age >= request_timeout / 2 && !self.is_leader() {
                let leader = self.cfg.leader(self.view);
                for request in self.pending.take_stale(now, request_timeout / 2) {
                    let instance = self.cfg.instance;
                    self.send(leader, Message::Forward { instance, request });
                }
            }
        }
        if self
            .slot
            .started_ms
            .is_some_and(|s| now.saturating_sub(s) > request_timeout)
        {
            self.complain(Complaint::SlotStuck);
        }
    }
}
