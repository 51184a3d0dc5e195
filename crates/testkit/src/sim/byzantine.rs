//! Byzantine behaviours. A Byzantine replica runs an honest state machine and then
//! corrupts what it sends: it may only sign with its own key, like a real attacker.

use std::sync::Arc;

use bft::certificate::vote_bytes;
use bft::{Digest, Message, Proposal, ReplicaId, Signer, ViewChange, Vote};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// How a Byzantine replica misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByzMode {
    /// As leader, sends one proposal to half the replicas and another to the other
    /// half for the same sequence, and votes for both.
    Equivocate,
    /// Sends votes (and checkpoint votes) for random digests to random replicas, and
    /// view changes for random higher views.
    ConflictingVotes,
    /// Sends nothing at all.
    Silent,
    /// As leader, proposes batches whose metadata the application rejects.
    BadProposal,
    /// Claims to be far ahead in heartbeats and answers state-transfer requests with
    /// tampered decisions (certificates that do not verify) and tampered snapshots.
    LyingSync,
}

impl ByzMode {
    /// A random mode.
    pub fn random(rng: &mut ChaCha8Rng) -> ByzMode {
        match rng.gen_range(0..5) {
            0 => ByzMode::Equivocate,
            1 => ByzMode::ConflictingVotes,
            2 => ByzMode::Silent,
            3 => ByzMode::BadProposal,
            _ => ByzMode::LyingSync,
        }
    }
}

/// Rewrites a message the Byzantine replica `me` sends to `to`; what it signs, it signs
/// with `signer` for cluster id `chain` (those of the set it is in). `None` drops it.
#[allow(clippy::too_many_arguments)]
pub fn corrupt(
    mode: ByzMode,
    me: ReplicaId,
    signer: &dyn Signer,
    chain: bft::ChainId,
    to: ReplicaId,
    msg: Message,
    rng: &mut ChaCha8Rng,
) -> Vec<Message> {
    match (mode, msg) {
        (ByzMode::Silent, _) => vec![],
        (ByzMode::Equivocate, Message::PrePrepare { view, proposal }) if to % 2 == 1 => {
            let mut other = Proposal::clone(&proposal);
            if other.requests.len() >= 2 {
                other.requests.reverse();
            } else {
                other.requests.clear();
            }
            let d = other.digest();
            let vote = sign_vote(signer, chain, bft::Phase::Prepare, &other, view, d);
            vec![
                Message::PrePrepare {
                    view,
                    proposal: Arc::new(other.clone()),
                },
                Message::Vote(vote),
                Message::Vote(sign_vote(signer, chain, bft::Phase::Commit, &other, view, d)),
            ]
        }
        (ByzMode::BadProposal, Message::PrePrepare { view, proposal }) => {
            let mut bad = Proposal::clone(&proposal);
            bad.metadata = vec![0xba, 0xd0];
            vec![Message::PrePrepare {
                view,
                proposal: Arc::new(bad),
            }]
        }
        (ByzMode::ConflictingVotes, Message::Vote(v)) if rng.gen_bool(0.6) => {
            let mut digest = Digest::default();
            rng.fill(&mut digest.0[..]);
            let bytes = vote_bytes(&chain, v.phase, v.instance, v.view, v.seq, &digest);
            vec![Message::Vote(Vote {
                digest,
                signature: signer.sign(&bytes),
                ..v
            })]
        }
        (ByzMode::ConflictingVotes, Message::Heartbeat { instance, view, .. }) if rng.gen_bool(0.2) => {
            let target = view + rng.gen_range(1..4);
            let bytes = ViewChange::signed_bytes(&chain, instance, me, target, None, None);
            vec![Message::ViewChange(Arc::new(ViewChange {
                instance,
                from: me,
                target,
                last_decided: None,
                prepared: None,
                signature: signer.sign(&bytes),
            }))]
        }
        (
            ByzMode::LyingSync,
            Message::Heartbeat {
                instance,
                view,
                last_decided,
            },
        ) => vec![Message::Heartbeat {
            instance,
            view,
            last_decided: last_decided + 100,
        }],
        (
            mode,
            msg @ (Message::SyncResponse { .. } | Message::SyncSnapshot { .. } | Message::Checkpoint(_)),
        ) => corrupt_sync(mode, signer, chain, msg, rng),
        (_, msg) => vec![msg],
    }
}

/// The state-transfer and checkpoint part of [`corrupt`].
fn corrupt_sync(
    mode: ByzMode,
    signer: &dyn Signer,
    chain: bft::ChainId,
    msg: Message,
    rng: &mut ChaCha8Rng,
) -> Vec<Message> {
    match (mode, msg) {
        (ByzMode::LyingSync, Message::SyncResponse { instance, decisions }) => {
            let tampered = decisions
                .iter()
                .map(|d| {
                    let mut d = bft::Decision::clone(d);
                    Arc::make_mut(&mut d.proposal).requests.push(b"forged".to_vec());
                    Arc::new(d)
                })
                .collect();
            vec![Message::SyncResponse {
                instance,
                decisions: tampered,
            }]
        }
        (
            ByzMode::LyingSync,
            Message::SyncSnapshot {
                checkpoint: cp,
                switches,
            },
        ) => {
            // The quorum's signatures over another snapshot: the digest no longer matches.
            let mut forged = bft::StableCheckpoint::clone(&cp);
            let mut snapshot = forged.snapshot.to_vec();
            snapshot.extend_from_slice(&[0x66; 32]);
            forged.snapshot = Arc::new(snapshot);
            vec![Message::SyncSnapshot {
                checkpoint: Arc::new(forged),
                switches,
            }]
        }
        (ByzMode::ConflictingVotes, Message::Checkpoint(c)) => {
            // A validly signed vote for a state nobody has.
            let mut digest = Digest::default();
            rng.fill(&mut digest.0[..]);
            let bytes = bft::checkpoint_bytes(&chain, c.instance, c.seq, &digest);
            vec![Message::Checkpoint(bft::CheckpointVote {
                digest,
                signature: signer.sign(&bytes),
                ..c
            })]
        }
        (_, msg) => vec![msg],
    }
}

fn sign_vote(
    signer: &dyn Signer,
    chain: bft::ChainId,
    phase: bft::Phase,
    p: &Proposal,
    view: u64,
    d: Digest,
) -> Vote {
    Vote {
        phase,
        instance: p.instance,
        view,
        seq: p.seq,
        digest: d,
        signature: signer.sign(&vote_bytes(&chain, phase, p.instance, view, p.seq, &d)),
    }
}

/// What a Byzantine replica outside the set in force (one a switch removed, or a joiner
/// not yet in) sends when it sees a proposal: prepare and commit votes for it, validly
/// signed with `signer` (the key its id has in the set it follows) for that set's
/// cluster id `chain`, so that a member counting a non-member's vote would complete a
/// certificate with it (the checker refuses a decision whose certificate counts a
/// non-member).
pub fn outsider_votes(signer: &dyn Signer, chain: bft::ChainId, msg: &Message) -> Vec<Message> {
    let Message::PrePrepare { view, proposal } = msg else {
        return Vec::new();
    };
    let digest = proposal.digest();
    [bft::Phase::Prepare, bft::Phase::Commit]
        .into_iter()
        .map(|phase| {
            let bytes = vote_bytes(&chain, phase, proposal.instance, *view, proposal.seq, &digest);
            Message::Vote(Vote {
                phase,
                instance: proposal.instance,
                view: *view,
                seq: proposal.seq,
                digest,
                signature: signer.sign(&bytes),
            })
        })
        .collect()
}
