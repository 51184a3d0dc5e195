//! Helpers of the transition table tests: signed messages and output summaries.

#![allow(dead_code)]

use std::sync::Arc;

use bft::certificate::{Certificate, Phase, Prepared, vote_bytes};
use bft::crypto::TestKeys;
use bft::messages::{ViewChange, Vote};
use bft::{
    ChainId, Config, Decision, Input, InstanceId, Message, NullApp, Output, Proposal, Replica, ReplicaId,
    Signer, WalEntry,
};

pub const N: u32 = 4;
pub const I: InstanceId = InstanceId(0);

pub fn keys() -> TestKeys {
    TestKeys::new(11)
}

pub fn config(id: ReplicaId) -> Config {
    let mut c = Config::new(id, N);
    c.max_batch_count = 2;
    c.batch_interval_ms = 10;
    c.request_timeout_ms = 1000;
    c.heartbeat_interval_ms = 100;
    c.heartbeat_timeout_ms = 500;
    c.view_change_timeout_ms = 400;
    c
}

pub fn replica(id: ReplicaId) -> Replica<NullApp> {
    let k = keys();
    Replica::new(
        config(id),
        NullApp::default(),
        Box::new(k.signer(id)),
        Arc::new(k),
    )
}

pub fn proposal(seq: u64, reqs: &[&str]) -> Arc<Proposal> {
    Arc::new(Proposal {
        instance: I,
        seq,
        requests: reqs.iter().map(|r| r.as_bytes().to_vec()).collect(),
        metadata: vec![],
    })
}

pub fn vote(phase: Phase, from: ReplicaId, view: u64, p: &Proposal) -> Input {
    let d = p.digest();
    let signature = keys()
        .signer(from)
        .sign(&vote_bytes(&ChainId::default(), phase, I, view, p.seq, &d));
    msg(
        from,
        Message::Vote(Vote {
            phase,
            instance: I,
            view,
            seq: p.seq,
            digest: d,
            signature,
        }),
    )
}

pub fn cert(phase: Phase, view: u64, p: &Proposal, signers: &[ReplicaId]) -> Certificate {
    let d = p.digest();
    let bytes = vote_bytes(&ChainId::default(), phase, I, view, p.seq, &d);
    Certificate {
        phase,
        instance: I,
        view,
        seq: p.seq,
        digest: d,
        signatures: signers
            .iter()
            .map(|&s| (s, keys().signer(s).sign(&bytes)))
            .collect(),
    }
}

pub fn decision(view: u64, p: &Arc<Proposal>) -> Arc<Decision> {
    Arc::new(Decision {
        proposal: p.clone(),
        certificate: cert(Phase::Commit, view, p, &[0, 1, 2]),
    })
}

pub fn view_change(from: ReplicaId, target: u64, prepared: Option<Prepared>) -> Arc<ViewChange> {
    let bytes = ViewChange::signed_bytes(&ChainId::default(), I, from, target, None, prepared.as_ref());
    Arc::new(ViewChange {
        instance: I,
        from,
        target,
        last_decided: None,
        prepared,
        signature: keys().signer(from).sign(&bytes),
    })
}

pub fn msg(from: ReplicaId, msg: Message) -> Input {
    Input::Message { from, msg }
}

pub fn pre_prepare(from: ReplicaId, view: u64, p: &Arc<Proposal>) -> Input {
    msg(
        from,
        Message::PrePrepare {
            view,
            proposal: p.clone(),
        },
    )
}

/// One line per output: what kind, to whom, for which view / sequence.
pub fn summary(o: &Output) -> String {
    match o {
        Output::Persist(e) => match e {
            WalEntry::Accepted { view, proposal } => format!("persist accepted v{view} s{}", proposal.seq),
            WalEntry::Prepared(p) => {
                format!("persist prepared v{} s{}", p.certificate.view, p.certificate.seq)
            }
            WalEntry::ViewChange { target } => format!("persist view-change {target}"),
            WalEntry::NewView {
                view,
                decided,
                carried,
            } => format!(
                "persist new-view v{view} decided={decided} carried={:?}",
                carried.as_ref().map(|p| p.seq)
            ),
            WalEntry::Decided(d) => format!("persist decided s{}", d.seq()),
            WalEntry::Switched {
                epoch,
                members,
                decision,
            } => {
                format!("persist switched s{} e{epoch} {members:?}", decision.seq())
            }
            WalEntry::Checkpoint { checkpoint, state } => {
                format!(
                    "persist checkpoint s{} (+{} restated)",
                    checkpoint.seq,
                    state.len()
                )
            }
        },
        Output::Send { to, msg } => format!("send r{to} {}", msg_summary(msg)),
        Output::Broadcast(m) => format!("broadcast {}", msg_summary(m)),
        Output::Deliver(d) => format!("deliver s{} ({} requests)", d.seq(), d.proposal.requests.len()),
        Output::ViewInstalled { view, leader } => format!("installed v{view} leader r{leader}"),
        Output::Installed { seq, .. } => format!("installed snapshot s{seq}"),
        Output::Refused { reason, .. } => format!("refused {reason:?}"),
    }
}

pub fn msg_summary(m: &Message) -> String {
    match m {
        Message::Forward { request, .. } => format!("forward {}", String::from_utf8_lossy(request)),
        Message::PrePrepare { view, proposal } => {
            format!(
                "pre-prepare v{view} s{} n={}",
                proposal.seq,
                proposal.requests.len()
            )
        }
        Message::Vote(v) => format!("{:?} v{} s{}", v.phase, v.view, v.seq).to_lowercase(),
        Message::ViewChange(vc) => format!(
            "view-change {} prepared={:?}",
            vc.target,
            vc.prepared.as_ref().map(|p| p.certificate.seq)
        ),
        Message::NewView(nv) => format!("new-view v{} ({} vcs)", nv.view, nv.view_changes.len()),
        Message::Heartbeat {
            view, last_decided, ..
        } => format!("heartbeat v{view} h{last_decided}"),
        Message::SyncRequest { from_seq, .. } => format!("sync-request from s{from_seq}"),
        Message::SyncResponse { decisions, .. } => format!("sync-response {} decisions", decisions.len()),
        Message::Checkpoint(c) => format!("checkpoint s{}", c.seq),
        Message::SyncSnapshot { checkpoint, .. } => format!("sync-snapshot s{}", checkpoint.seq),
    }
}

pub struct Step {
    pub input: Input,
    pub expected: Vec<&'static str>,
}

pub fn step(input: Input, expected: &[&'static str]) -> Step {
    Step {
        input,
        expected: expected.to_vec(),
    }
}

pub fn run(name: &str, mut r: Replica<NullApp>, steps: Vec<Step>) -> Replica<NullApp> {
    for (i, s) in steps.into_iter().enumerate() {
        let got: Vec<String> = r.handle(s.input).iter().map(summary).collect();
        assert_eq!(got, s.expected, "case `{name}`, step {i}");
    }
    r
}

pub const START: &[&str] = &["broadcast heartbeat v0 h0"];
