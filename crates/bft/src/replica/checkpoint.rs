//! Checkpoints, pruning and state transfer by snapshot (see [`crate::checkpoint`]).
//!
//! After every `checkpoint_interval`-th decision the replica snapshots its application
//! and broadcasts a signed vote; a quorum of votes for its own digest makes the
//! checkpoint stable. It then persists one [`WalEntry::Checkpoint`] that restates all
//! the WAL must still say (view, view-change target, the current slot), which lets the
//! WAL drop everything before it, and prunes the decisions it keeps for state transfer
//! and their request digests to `retain_decisions` below the checkpoint. A peer asking
//! for pruned decisions gets the stable checkpoint instead ([`Message::SyncSnapshot`]).
//!
//! Memory: at most [`MAX_OWN`] own snapshots not yet stable and votes for at most
//! [`MAX_VOTED_SEQS`] sequence numbers, one per replica each.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Replica, Slot, Status};
use crate::Output;
use crate::app::Application;
use crate::checkpoint::{CheckpointVote, StableCheckpoint, checkpoint_bytes};
use crate::crypto::Signature;
use crate::messages::Message;
use crate::types::{Digest, ReplicaId, Seq};
use crate::wal::WalEntry;

/// Own snapshots kept while they wait for a quorum.
const MAX_OWN: usize = 4;
/// Sequence numbers with votes kept while they wait for a quorum.
const MAX_VOTED_SEQS: usize = 8;

/// Checkpoint bookkeeping of a replica.
#[derive(Debug, Default)]
pub(super) struct Checkpoints {
    /// The last stable checkpoint.
    pub(super) stable: Option<Arc<StableCheckpoint>>,
    /// Own snapshots above it, by sequence number.
    own: BTreeMap<Seq, (Digest, Arc<Vec<u8>>)>,
    /// Verified votes above it: per sequence number, per voter.
    votes: BTreeMap<Seq, BTreeMap<ReplicaId, (Digest, Signature)>>,
}

impl Checkpoints {
    fn stable_seq(&self) -> Seq {
        self.stable.as_ref().map_or(0, |c| c.seq)
    }

    /// Forgets everything at or below `seq`.
    fn forget_through(&mut self, seq: Seq) {
        self.own.retain(|s, _| *s > seq);
        self.votes.retain(|s, _| *s > seq);
    }

    /// Forgets the snapshots and votes that wait for a quorum (the replica set changed:
    /// votes of the old set do not count in the new one). The stable checkpoint stays.
    pub(super) fn forget_votes(&mut self) {
        self.own.clear();
        self.votes.clear();
    }
}

impl<A: Application> Replica<A> {
    /// The last stable checkpoint, if any.
    pub fn stable_checkpoint(&self) -> Option<&Arc<StableCheckpoint>> {
        self.checkpoints.stable.as_ref()
    }

    /// Decisions held in memory for state transfer.
    pub fn held_decisions(&self) -> usize {
        self.decisions.len()
    }

    fn is_checkpoint_seq(&self, seq: Seq) -> bool {
        let k = self.cfg.checkpoint_interval;
        k > 0 && seq > 0 && seq.is_multiple_of(k)
    }

    /// Called after each decision: at a checkpoint sequence, snapshot and vote.
    pub(super) fn take_checkpoint(&mut self) {
        let seq = self.last_decided;
        // A checkpoint proves its last decision with that decision's certificate; the
        // decision that switched sets is certified by the old set, which the new one's
        // members do not check against. Non-members do not vote.
        if !self.is_checkpoint_seq(seq) || seq == self.epoch_start || !self.is_member() {
            return;
        }
        // A snapshot larger than a state-transfer message could never be served.
        let Some(snapshot) = self.app.snapshot().filter(|s| s.len() <= self.cfg.sync_max_bytes) else {
            return;
        };
        let digest = Digest::of_snapshot(&snapshot);
        let own = &mut self.checkpoints.own;
        own.insert(seq, (digest, Arc::new(snapshot)));
        while own.len() > MAX_OWN {
            own.pop_first();
        }
        let bytes = checkpoint_bytes(&self.cfg.chain, self.cfg.instance, seq, &digest);
        let vote = CheckpointVote {
            instance: self.cfg.instance,
            from: self.cfg.id,
            seq,
            digest,
            signature: self.signer.sign(&bytes),
        };
        self.record_checkpoint_vote(&vote);
        self.broadcast(Message::Checkpoint(vote));
        self.try_stabilize(seq);
    }

    pub(super) fn on_checkpoint(&mut self, from: ReplicaId, vote: CheckpointVote) {
        let k = self.cfg.checkpoint_interval;
        let horizon = self
            .last_decided
            .saturating_add(k.saturating_mul(MAX_VOTED_SEQS as u64));
        if vote.from != from
            || !self.is_member()
            || !self.is_checkpoint_seq(vote.seq)
            || vote.seq <= self.checkpoints.stable_seq()
            || vote.seq > horizon
            || !vote.verify(&self.cfg.chain, self.verifier.as_ref(), &self.cfg.members)
        {
            return;
        }
        self.record_checkpoint_vote(&vote);
        self.try_stabilize(vote.seq);
    }

    fn record_checkpoint_vote(&mut self, vote: &CheckpointVote) {
        let votes = &mut self.checkpoints.votes;
        votes
            .entry(vote.seq)
            .or_default()
            .insert(vote.from, (vote.digest, vote.signature.clone()));
        while votes.len() > MAX_VOTED_SEQS {
            votes.pop_first();
        }
    }

    /// Makes the checkpoint at `seq` stable if a quorum voted for this replica's own
    /// snapshot digest there.
    fn try_stabilize(&mut self, seq: Seq) {
        let Some((digest, snapshot)) = self.checkpoints.own.get(&seq).cloned() else {
            return;
        };
        let Some(votes) = self.checkpoints.votes.get(&seq) else {
            return;
        };
        let signatures: Vec<(ReplicaId, Signature)> = votes
            .iter()
            .filter(|(_, (d, _))| *d == digest)
            .map(|(id, (_, sig))| (*id, sig.clone()))
            .collect();
        if (signatures.len() as u32) < self.quorum.q {
            return;
        }
        let Some(last_commit) = self.decision(seq).map(|d| d.certificate.clone()) else {
            return;
        };
        let cp = Arc::new(StableCheckpoint {
            instance: self.cfg.instance,
            seq,
            digest,
            signatures,
            snapshot,
            last_commit,
        });
        self.checkpoints.stable = Some(cp.clone());
        self.checkpoints.forget_through(seq);
        self.persist_checkpoint(cp);
        self.prune(seq);
    }

    /// Persists `cp` with a restatement of the rest of what the WAL must keep, so the
    /// shell may drop every entry before it (and the decisions up to `cp.seq`).
    fn persist_checkpoint(&mut self, checkpoint: Arc<StableCheckpoint>) {
        // The WAL drops the `Switched` entries with everything before the checkpoint:
        // restated first (the proofs kept, the current set's last), so that a restore
        // starts the current set's views anew and keeps its proofs.
        let mut state: Vec<WalEntry> = self
            .switches
            .iter()
            .map(|s| WalEntry::Switched {
                epoch: s.epoch,
                members: s.members.clone(),
                decision: s.decision.clone(),
            })
            .collect();
        state.push(WalEntry::NewView {
            view: self.view,
            decided: self.carry.decided,
            carried: self.carry.proposal.clone(),
        });
        match self.status {
            Status::ViewChanging { target } => state.push(WalEntry::ViewChange { target }),
            Status::Normal => {
                if let Some(a) = &self.slot.accepted {
                    state.push(WalEntry::Accepted {
                        view: self.view,
                        proposal: a.proposal.clone(),
                    });
                }
            }
        }
        if let Some(p) = &self.prepared {
            state.push(WalEntry::Prepared(p.clone()));
        }
        self.persist(WalEntry::Checkpoint { checkpoint, state });
    }

    /// Drops the decisions (and their request digests) more than `retain_decisions`
    /// below `stable`.
    fn prune(&mut self, stable: Seq) {
        let keep_from = stable.saturating_sub(self.cfg.retain_decisions).saturating_add(1);
        while let Some(d) = self.decisions.front().filter(|d| d.seq() < keep_from) {
            for r in &d.proposal.requests {
                self.decided_requests.remove(&Digest::of_request(r));
            }
            self.decisions.pop_front();
        }
    }

    /// State transfer: a peer's stable checkpoint ahead of this replica.
    pub(super) fn on_sync_snapshot(
        &mut self,
        from: ReplicaId,
        cp: Arc<StableCheckpoint>,
        switches: &[Arc<crate::Decision>],
    ) {
        // Only an answer to a request of ours is worth verifying (a quorum of signatures
        // and a hash over up to `sync_max_bytes`): unsolicited ones are dropped. A peer
        // asked earlier is read when its answer comes after the next was asked (once).
        if !self.sync.unanswered.remove(&from) {
            return;
        }
        if self.sync.outstanding.is_some_and(|(p, _)| p == from) {
            self.sync.outstanding = None;
        }
        if cp.seq < self.next_seq() {
            self.maybe_sync();
            return;
        }
        let crossed = self.verify_across(&cp, switches);
        let Some(crossed) = crossed.filter(|_| self.app.install_snapshot(cp.seq, &cp.snapshot)) else {
            // Forget what the peer claimed; it will tell us again if it gets ahead.
            let mine = self.last_decided;
            self.sync.peer_heights.insert(from, mine);
            self.maybe_sync();
            return;
        };
        // The sets between ours and the checkpoint's (persisted with the checkpoint).
        self.cross(crossed);
        self.jump_to(cp.clone());
        // Requests pending here may be among the skipped decisions, which the
        // de-duplication set never saw: keep only those the application, now holding the
        // snapshot, still accepts (it refuses repeats of what it applied, docs/bft.md
        // "Checkpoints"). Dropping them all lost requests that only this replica's pool
        // still held: a follower forwards a request once, so a leader that caught up by
        // state transfer never proposed it (simulation seed 1000091538).
        let app = &mut self.app;
        self.pending.retain(|request| app.verify_request(request));
        self.persist_checkpoint(cp.clone());
        self.out.push(Output::Installed {
            seq: cp.seq,
            snapshot: cp.snapshot.clone(),
        });
        if self.status == Status::Normal {
            self.replay_future();
            self.maybe_propose();
        }
        self.maybe_sync();
    }

    /// Moves this replica's decided state to stable checkpoint `cp` (its application
    /// already holds the snapshot): no decisions are kept below it.
    pub(super) fn jump_to(&mut self, cp: Arc<StableCheckpoint>) {
        self.last_decided = cp.seq;
        self.last_commit = Some(cp.last_commit.clone());
        self.decisions.clear();
        self.decided_requests.clear();
        self.slot = Slot::default();
        let next = self.next_seq();
        self.prepared = self.prepared.take().filter(|p| p.certificate.seq == next);
        self.checkpoints.forget_through(cp.seq);
        self.checkpoints.stable = Some(cp);
        self.last_leader_heard = self.now;
    }

    /// The stable checkpoint to answer a request for decisions from `from_seq`, when
    /// this replica no longer holds decision `from_seq`.
    pub(super) fn snapshot_for(&self, from_seq: Seq) -> Option<Arc<StableCheckpoint>> {
        let first = self.decisions.front().map_or(self.next_seq(), |d| d.seq());
        self.checkpoints
            .stable
            .clone()
            .filter(|cp| from_seq < first && cp.seq >= from_seq)
    }
}
