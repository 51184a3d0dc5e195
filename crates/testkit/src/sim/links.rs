//! Slow links for the simulation: a link sends one message at a time at a fixed
//! bandwidth, and a message whose identical copy is still queued on the link is not
//! queued again (the consenter transport's rule: retransmissions of a large proposal
//! must not pile up on a slow link).

use std::collections::HashMap;
use std::sync::Arc;

use bft::certificate::{Phase, vote_bytes};
use bft::crypto::TestKeys;
use bft::{
    Certificate, ChainId, Decision, Digest, InstanceId, Message, Proposal, Quorum, ReplicaId, Signer, Vote,
};

/// Per-link state of the slow-link model.
#[derive(Debug, Default)]
pub struct Links {
    /// When each link finishes sending what it has.
    busy_until: HashMap<(ReplicaId, ReplicaId), u64>,
    /// Messages queued on each link with their departure time.
    queued: HashMap<(ReplicaId, ReplicaId), Vec<(u64, Message)>>,
}

impl Links {
    /// When `msg` sent at `now` on `from → to` is fully transferred at `bandwidth`
    /// bytes per ms, or `None` if an identical copy is still queued on the link.
    pub fn send(
        &mut self,
        now: u64,
        from: ReplicaId,
        to: ReplicaId,
        msg: &Message,
        bandwidth: u64,
    ) -> Option<u64> {
        let queued = self.queued.entry((from, to)).or_default();
        queued.retain(|(departure, _)| *departure > now);
        if queued.iter().any(|(_, m)| m == msg) {
            return None;
        }
        let busy = self.busy_until.entry((from, to)).or_default();
        let departure = (*busy).max(now);
        let transfer = (size(msg) as u64).div_ceil(bandwidth.max(1));
        *busy = departure + transfer;
        if departure > now {
            queued.push((departure, msg.clone()));
        }
        Some(*busy)
    }

    /// True iff no link is still sending at `now`.
    pub fn drained(&self, now: u64) -> bool {
        self.busy_until.values().all(|b| *b <= now)
    }
}

/// Approximate encoded size of a message.
pub fn size(msg: &Message) -> usize {
    let proposal = |p: &Proposal| p.request_bytes() + 16 * p.requests.len() + p.metadata.len() + 64;
    match msg {
        Message::Forward { request, .. } => request.len() + 16,
        Message::PrePrepare { proposal: p, .. } => proposal(p),
        Message::ViewChange(vc) => 256 + vc.prepared.as_ref().map_or(0, |p| proposal(&p.proposal)),
        Message::NewView(nv) => nv
            .view_changes
            .iter()
            .map(|vc| 256 + vc.prepared.as_ref().map_or(0, |p| proposal(&p.proposal)))
            .sum(),
        Message::SyncResponse { decisions, .. } => {
            decisions.iter().map(|d| proposal(&d.proposal) + 256).sum()
        }
        Message::SyncSnapshot { checkpoint, switches } => {
            checkpoint.approx_bytes()
                + switches
                    .iter()
                    .map(|d| proposal(&d.proposal) + 256)
                    .sum::<usize>()
        }
        Message::Vote(_)
        | Message::Heartbeat { .. }
        | Message::SyncRequest { .. }
        | Message::Checkpoint(_) => 96,
    }
}

/// A validly signed prepare vote of `from` (in the set of cluster id `chain`) for a
/// digest nobody proposed.
pub fn junk_vote(signer: &dyn Signer, chain: ChainId, view: u64, seq: u64) -> Message {
    let mut digest = Digest([0x6a; 32]);
    digest.0[..8].copy_from_slice(&seq.to_le_bytes());
    let bytes = vote_bytes(&chain, Phase::Prepare, InstanceId(0), view, seq, &digest);
    Message::Vote(Vote {
        phase: Phase::Prepare,
        instance: InstanceId(0),
        view,
        seq,
        digest,
        signature: signer.sign(&bytes),
    })
}

/// The chain of the "other cluster" that shares the simulated cluster's keys.
pub const FOREIGN_CHAIN: ChainId = ChainId([0xf0; 32]);

/// A state-transfer answer of another chain with the same keys: a decision at `seq`
/// of a request no client of this cluster submitted, certified by a quorum of this
/// cluster's keys signing for [`FOREIGN_CHAIN`].
pub fn foreign_sync_response(keys: &TestKeys, n: u32, seq: u64) -> Message {
    let proposal = Proposal {
        instance: InstanceId(0),
        seq,
        requests: vec![format!("foreign-tx-{seq}").into_bytes()],
        metadata: vec![0; 8],
    };
    let digest = proposal.digest();
    let bytes = vote_bytes(&FOREIGN_CHAIN, Phase::Commit, InstanceId(0), 0, seq, &digest);
    let signatures = (0..Quorum::new(n).q)
        .map(|i| (i, keys.signer(i).sign(&bytes)))
        .collect();
    Message::SyncResponse {
        instance: InstanceId(0),
        decisions: vec![Arc::new(Decision {
            proposal: Arc::new(proposal),
            certificate: Certificate {
                phase: Phase::Commit,
                instance: InstanceId(0),
                view: 0,
                seq,
                digest,
                signatures,
            },
        })],
    }
}
