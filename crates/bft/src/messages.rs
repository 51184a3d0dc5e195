//! Messages exchanged between replicas. Channels are assumed authenticated (the
//! consenter transport signs every envelope), so the transport tells the receiver who
//! sent a message; signatures are only needed where a message must convince a third
//! party: votes (they form certificates) and view changes (they form new-view proofs).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::certificate::{Certificate, Decision, Phase, Prepared};
use crate::checkpoint::{CheckpointVote, StableCheckpoint};
use crate::crypto::{Signature, Verifier};
use crate::tags;
use crate::types::{ChainId, Digest, InstanceId, Members, Proposal, ReplicaId, Seq, View};
use crate::{Error, Result};

/// A protocol message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A client request forwarded to the leader (SmartBFT request forwarding).
    Forward {
        /// Instance.
        instance: InstanceId,
        /// The opaque request.
        request: Vec<u8>,
    },
    /// The leader's proposal for `(view, proposal.seq)` (PBFT pre-prepare).
    PrePrepare {
        /// View of the proposal.
        view: View,
        /// The proposal (carries instance and sequence).
        proposal: Arc<Proposal>,
    },
    /// A signed prepare or commit vote.
    Vote(Vote),
    /// A signed request to move to a new view, with the sender's evidence.
    ViewChange(Arc<ViewChange>),
    /// The proof that a quorum asked for a view; installs it.
    NewView(Arc<NewView>),
    /// Periodic liveness and height gossip; every replica sends it.
    Heartbeat {
        /// Instance.
        instance: InstanceId,
        /// Sender's current view.
        view: View,
        /// Sender's highest decided sequence number.
        last_decided: Seq,
    },
    /// State transfer: "send me your decisions from `from_seq` on".
    SyncRequest {
        /// Instance.
        instance: InstanceId,
        /// First sequence number wanted.
        from_seq: Seq,
    },
    /// State transfer answer: consecutive decisions with their certificates.
    SyncResponse {
        /// Instance.
        instance: InstanceId,
        /// Decisions in increasing sequence order.
        decisions: Vec<Arc<Decision>>,
    },
    /// A signed checkpoint vote, broadcast after every `checkpoint_interval` decisions.
    Checkpoint(CheckpointVote),
    /// State transfer answer when the decisions asked for were pruned: the sender's
    /// last stable checkpoint (decisions after it follow on the next request).
    SyncSnapshot {
        /// The checkpoint with its snapshot.
        checkpoint: Arc<StableCheckpoint>,
        /// The decisions that changed the replica set between the sequence asked for
        /// and the checkpoint, in order, each certified by the set before it: they let
        /// a replica of an older set check a checkpoint of a newer one
        /// ([`crate::Membership`]).
        switches: Vec<Arc<Decision>>,
    },
}

impl Message {
    /// The instance the message belongs to.
    pub fn instance(&self) -> InstanceId {
        match self {
            Message::Forward { instance, .. }
            | Message::Heartbeat { instance, .. }
            | Message::SyncRequest { instance, .. }
            | Message::SyncResponse { instance, .. } => *instance,
            Message::PrePrepare { proposal, .. } => proposal.instance,
            Message::Vote(v) => v.instance,
            Message::ViewChange(vc) => vc.instance,
            Message::NewView(nv) => nv.instance,
            Message::Checkpoint(c) => c.instance,
            Message::SyncSnapshot { checkpoint, .. } => checkpoint.instance,
        }
    }
}

/// A signed prepare or commit vote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vote {
    /// Prepare or commit.
    pub phase: Phase,
    /// Instance.
    pub instance: InstanceId,
    /// View voted in.
    pub view: View,
    /// Sequence number voted for.
    pub seq: Seq,
    /// Digest of the proposal voted for.
    pub digest: Digest,
    /// Signature over [`crate::certificate::vote_bytes`].
    pub signature: Signature,
}

/// A view-change message (PBFT §4.4): "I want view `target`; the last decision I hold
/// and the proposal I prepared but have not seen decided are these."
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewChange {
    /// Instance.
    pub instance: InstanceId,
    /// Sender (bound by the signature, so the message can be relayed).
    pub from: ReplicaId,
    /// The view asked for.
    pub target: View,
    /// Commit certificate of the sender's highest decision (none before the first).
    pub last_decided: Option<Certificate>,
    /// The sender's highest prepared certificate above its last decision.
    pub prepared: Option<Prepared>,
    /// Sender's signature over [`ViewChange::signed_bytes`].
    pub signature: Signature,
}

impl ViewChange {
    /// The bytes the sender signs: everything but the signature, certificates by
    /// their (view, seq, digest) summary (their own signatures protect the rest).
    pub fn signed_bytes(
        chain: &ChainId,
        instance: InstanceId,
        from: ReplicaId,
        target: View,
        last_decided: Option<&Certificate>,
        prepared: Option<&Prepared>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(160);
        out.extend_from_slice(tags::VIEW_CHANGE);
        out.extend_from_slice(&chain.0);
        out.extend_from_slice(&instance.0.to_le_bytes());
        out.extend_from_slice(&from.to_le_bytes());
        out.extend_from_slice(&target.to_le_bytes());
        for c in [last_decided, prepared.map(|p| &p.certificate)] {
            match c {
                None => out.push(0),
                Some(c) => {
                    out.push(1);
                    out.extend_from_slice(&c.view.to_le_bytes());
                    out.extend_from_slice(&c.seq.to_le_bytes());
                    out.extend_from_slice(&c.digest.0);
                }
            }
        }
        out
    }

    /// Highest decided sequence number this message proves (0 if none).
    pub fn decided_seq(&self) -> Seq {
        self.last_decided.as_ref().map_or(0, |c| c.seq)
    }

    /// Checks the signature and both certificates (all for cluster `chain`).
    pub fn verify(&self, chain: &ChainId, verifier: &dyn Verifier, members: &Members) -> Result<()> {
        let bytes = Self::signed_bytes(
            chain,
            self.instance,
            self.from,
            self.target,
            self.last_decided.as_ref(),
            self.prepared.as_ref(),
        );
        if !members.contains(self.from) || !verifier.verify(self.from, &bytes, &self.signature) {
            return Err(Error::BadViewChange {
                from: self.from,
                reason: "invalid signature".into(),
            });
        }
        if let Some(c) = &self.last_decided {
            if c.phase != Phase::Commit || c.instance != self.instance {
                return Err(Error::BadViewChange {
                    from: self.from,
                    reason: "last decision is not a commit certificate".into(),
                });
            }
            c.verify(chain, verifier, members)?;
        }
        if let Some(p) = &self.prepared {
            if p.proposal.instance != self.instance {
                return Err(Error::BadViewChange {
                    from: self.from,
                    reason: "prepared certificate of another instance".into(),
                });
            }
            p.verify(chain, verifier, members)?;
        }
        Ok(())
    }
}

/// The new-view proof (PBFT §4.4 new-view, without the O set: the engine decides one
/// sequence at a time, so at most one proposal can be pending across the change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewView {
    /// Instance.
    pub instance: InstanceId,
    /// The view being installed.
    pub view: View,
    /// A quorum of view changes for `view` from distinct replicas.
    pub view_changes: Vec<Arc<ViewChange>>,
}

/// What a new view obliges its leader to propose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Carry {
    /// Highest decided sequence number proven in the view changes.
    pub decided: Seq,
    /// The proposal that must be re-proposed at `decided + 1`, if any: the prepared
    /// certificate with the highest view among those for that sequence.
    pub proposal: Option<Arc<Proposal>>,
}

impl NewView {
    /// Verifies the quorum of view changes (distinct senders, all for `self.view`, all
    /// signed for cluster `chain`).
    pub fn verify(&self, chain: &ChainId, verifier: &dyn Verifier, members: &Members) -> Result<()> {
        let quorum = members.quorum();
        let mut senders = BTreeSet::new();
        for vc in &self.view_changes {
            if vc.target != self.view || vc.instance != self.instance {
                return Err(Error::BadNewView {
                    view: self.view,
                    reason: format!("view change of replica {} is for view {}", vc.from, vc.target),
                });
            }
            if !senders.insert(vc.from) {
                return Err(Error::BadNewView {
                    view: self.view,
                    reason: format!("replica {} counted twice", vc.from),
                });
            }
            vc.verify(chain, verifier, members)?;
        }
        if (senders.len() as u32) < quorum.q {
            return Err(Error::BadNewView {
                view: self.view,
                reason: format!("{} view changes, quorum is {}", senders.len(), quorum.q),
            });
        }
        Ok(())
    }

    /// What must be carried into the new view. Sound for any quorum of view changes:
    /// a proposal decided in an earlier view was prepared by a quorum, which intersects
    /// this quorum in a correct replica that reports it (or a later decision).
    ///
    /// `base` is the decision that started the replica set (0 for the first): every
    /// member decided it, but its certificate is the old set's and no view change of
    /// this set carries it, so the proven height is at least `base`.
    pub fn carry(&self, base: Seq) -> Carry {
        let decided = self
            .view_changes
            .iter()
            .map(|vc| vc.decided_seq())
            .max()
            .unwrap_or(0)
            .max(base);
        let proposal = self
            .view_changes
            .iter()
            .filter_map(|vc| vc.prepared.as_ref())
            .filter(|p| p.certificate.seq == decided + 1)
            .max_by_key(|p| p.certificate.view)
            .map(|p| p.proposal.clone());
        Carry { decided, proposal }
    }
}
