//! Conversions between the engine's messages (`bft::Message`) and their protobuf form
//! (`wire::pb::BftMessage`). Decoding rejects missing fields and malformed digests
//! with a typed error; semantic checks (signatures, quorums) stay in the engine.

use std::sync::Arc;

use bft::{
    Certificate, CheckpointVote, Decision, Digest, InstanceId, Message, NewView, Phase, Prepared, Proposal,
    Signature, StableCheckpoint, ViewChange, Vote,
};
use wire::pb;
use wire::pb::bft_message::Kind;

use crate::{Error, Result};

fn missing(what: &'static str) -> Error {
    Error::Decode { what }
}

fn phase_to_pb(p: Phase) -> i32 {
    match p {
        Phase::Prepare => pb::BftVotePhase::Prepare as i32,
        Phase::Commit => pb::BftVotePhase::Commit as i32,
    }
}

fn phase_from_pb(v: i32) -> Result<Phase> {
    match pb::BftVotePhase::try_from(v) {
        Ok(pb::BftVotePhase::Prepare) => Ok(Phase::Prepare),
        Ok(pb::BftVotePhase::Commit) => Ok(Phase::Commit),
        _ => Err(missing("vote phase")),
    }
}

fn digest_from_pb(bytes: &[u8]) -> Result<Digest> {
    <[u8; 32]>::try_from(bytes)
        .map(Digest)
        .map_err(|_| missing("32-byte digest"))
}

fn proposal_to_pb(p: &Proposal) -> pb::BftProposal {
    pb::BftProposal {
        instance: p.instance.0,
        seq: p.seq,
        requests: p.requests.clone(),
        metadata: p.metadata.clone(),
    }
}

fn proposal_from_pb(p: Option<pb::BftProposal>) -> Result<Arc<Proposal>> {
    let p = p.ok_or(missing("proposal"))?;
    Ok(Arc::new(Proposal {
        instance: InstanceId(p.instance),
        seq: p.seq,
        requests: p.requests,
        metadata: p.metadata,
    }))
}

fn signature_to_pb((replica, sig): &(bft::ReplicaId, Signature)) -> pb::BftReplicaSignature {
    pb::BftReplicaSignature {
        replica: *replica,
        signature: sig.0.clone(),
    }
}

fn cert_to_pb(c: &Certificate) -> pb::BftCertificate {
    pb::BftCertificate {
        phase: phase_to_pb(c.phase),
        instance: c.instance.0,
        view: c.view,
        seq: c.seq,
        digest: c.digest.0.to_vec(),
        signatures: c.signatures.iter().map(signature_to_pb).collect(),
    }
}

fn cert_from_pb(c: Option<pb::BftCertificate>) -> Result<Certificate> {
    let c = c.ok_or(missing("certificate"))?;
    Ok(Certificate {
        phase: phase_from_pb(c.phase)?,
        instance: InstanceId(c.instance),
        view: c.view,
        seq: c.seq,
        digest: digest_from_pb(&c.digest)?,
        signatures: signatures_from_pb(c.signatures),
    })
}

fn signatures_from_pb(signatures: Vec<pb::BftReplicaSignature>) -> Vec<(bft::ReplicaId, Signature)> {
    signatures
        .into_iter()
        .map(|s| (s.replica, Signature(s.signature)))
        .collect()
}

fn prepared_to_pb(p: &Prepared) -> pb::BftPreparedProposal {
    pb::BftPreparedProposal {
        proposal: Some(proposal_to_pb(&p.proposal)),
        certificate: Some(cert_to_pb(&p.certificate)),
    }
}

fn prepared_from_pb(p: pb::BftPreparedProposal) -> Result<Prepared> {
    Ok(Prepared {
        proposal: proposal_from_pb(p.proposal)?,
        certificate: cert_from_pb(p.certificate)?,
    })
}

/// Encodes a decision (also used by state transfer).
pub fn decision_to_pb(d: &Decision) -> pb::BftDecision {
    pb::BftDecision {
        proposal: Some(proposal_to_pb(&d.proposal)),
        certificate: Some(cert_to_pb(&d.certificate)),
    }
}

/// Decodes a decision; its certificate is not verified here.
pub fn decision_from_pb(d: pb::BftDecision) -> Result<Decision> {
    Ok(Decision {
        proposal: proposal_from_pb(d.proposal)?,
        certificate: cert_from_pb(d.certificate)?,
    })
}

fn view_change_to_pb(vc: &ViewChange) -> pb::BftViewChange {
    pb::BftViewChange {
        instance: vc.instance.0,
        from: vc.from,
        target: vc.target,
        last_decided: vc.last_decided.as_ref().map(cert_to_pb),
        prepared: vc.prepared.as_ref().map(prepared_to_pb),
        signature: vc.signature.0.clone(),
    }
}

fn view_change_from_pb(vc: pb::BftViewChange) -> Result<ViewChange> {
    Ok(ViewChange {
        instance: InstanceId(vc.instance),
        from: vc.from,
        target: vc.target,
        last_decided: vc.last_decided.map(|c| cert_from_pb(Some(c))).transpose()?,
        prepared: vc.prepared.map(prepared_from_pb).transpose()?,
        signature: Signature(vc.signature),
    })
}

/// Encodes an engine message.
pub fn message_to_pb(msg: &Message) -> pb::BftMessage {
    let kind = match msg {
        Message::Forward { request, .. } => Kind::Forward(pb::BftForward {
            request: request.clone(),
        }),
        Message::PrePrepare { view, proposal } => Kind::PrePrepare(pb::BftPrePrepare {
            view: *view,
            proposal: Some(proposal_to_pb(proposal)),
        }),
        Message::Vote(v) => Kind::Vote(pb::BftVote {
            phase: phase_to_pb(v.phase),
            instance: v.instance.0,
            view: v.view,
            seq: v.seq,
            digest: v.digest.0.to_vec(),
            signature: v.signature.0.clone(),
        }),
        Message::ViewChange(vc) => Kind::ViewChange(view_change_to_pb(vc)),
        Message::NewView(nv) => Kind::NewView(pb::BftNewView {
            instance: nv.instance.0,
            view: nv.view,
            view_changes: nv.view_changes.iter().map(|vc| view_change_to_pb(vc)).collect(),
        }),
        Message::Heartbeat {
            view, last_decided, ..
        } => Kind::Heartbeat(pb::BftHeartbeat {
            view: *view,
            last_decided: *last_decided,
        }),
        Message::SyncRequest { from_seq, .. } => {
            Kind::SyncRequest(pb::BftSyncRequest { from_seq: *from_seq })
        }
        Message::SyncResponse { decisions, .. } => Kind::SyncResponse(pb::BftSyncResponse {
            decisions: decisions.iter().map(|d| decision_to_pb(d)).collect(),
        }),
        Message::Checkpoint(c) => Kind::Checkpoint(pb::BftCheckpoint {
            from: c.from,
            seq: c.seq,
            digest: c.digest.0.to_vec(),
            signature: c.signature.0.clone(),
        }),
        Message::SyncSnapshot {
            checkpoint: c,
            switches,
        } => Kind::SyncSnapshot(pb::BftStableCheckpoint {
            seq: c.seq,
            digest: c.digest.0.to_vec(),
            signatures: c.signatures.iter().map(signature_to_pb).collect(),
            snapshot: c.snapshot.to_vec(),
            last_commit: Some(cert_to_pb(&c.last_commit)),
            switches: switches.iter().map(|d| decision_to_pb(d)).collect(),
        }),
    };
    pb::BftMessage {
        instance: msg.instance().0,
        kind: Some(kind),
    }
}

/// Decodes an engine message.
pub fn message_from_pb(m: pb::BftMessage) -> Result<Message> {
    let instance = InstanceId(m.instance);
    Ok(match m.kind.ok_or(missing("message kind"))? {
        Kind::Forward(f) => Message::Forward {
            instance,
            request: f.request,
        },
        Kind::PrePrepare(p) => Message::PrePrepare {
            view: p.view,
            proposal: proposal_from_pb(p.proposal)?,
        },
        Kind::Vote(v) => Message::Vote(Vote {
            phase: phase_from_pb(v.phase)?,
            instance: InstanceId(v.instance),
            view: v.view,
            seq: v.seq,
            digest: digest_from_pb(&v.digest)?,
            signature: Signature(v.signature),
        }),
        Kind::ViewChange(vc) => Message::ViewChange(Arc::new(view_change_from_pb(vc)?)),
        Kind::NewView(nv) => Message::NewView(Arc::new(NewView {
            instance: InstanceId(nv.instance),
            view: nv.view,
            view_changes: nv
                .view_changes
                .into_iter()
                .map(|vc| view_change_from_pb(vc).map(Arc::new))
                .collect::<Result<_>>()?,
        })),
        Kind::Heartbeat(h) => Message::Heartbeat {
            instance,
            view: h.view,
            last_decided: h.last_decided,
        },
        Kind::SyncRequest(s) => Message::SyncRequest {
            instance,
            from_seq: s.from_seq,
        },
        Kind::SyncResponse(s) => Message::SyncResponse {
            instance,
            decisions: s
                .decisions
                .into_iter()
                .map(|d| decision_from_pb(d).map(Arc::new))
                .collect::<Result<_>>()?,
        },
        Kind::Checkpoint(c) => Message::Checkpoint(CheckpointVote {
            instance,
            from: c.from,
            seq: c.seq,
            digest: digest_from_pb(&c.digest)?,
            signature: Signature(c.signature),
        }),
        Kind::SyncSnapshot(c) => Message::SyncSnapshot {
            checkpoint: Arc::new(StableCheckpoint {
                instance,
                seq: c.seq,
                digest: digest_from_pb(&c.digest)?,
                signatures: signatures_from_pb(c.signatures),
                snapshot: Arc::new(c.snapshot),
                last_commit: cert_from_pb(c.last_commit)?,
            }),
            switches: c
                .switches
                .into_iter()
                .map(|d| decision_from_pb(d).map(Arc::new))
                .collect::<Result<_>>()?,
        },
    })
}
