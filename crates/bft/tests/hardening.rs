//! Tests of the engine's hardening against a hostile or overloaded cluster: chain
//! binding, junk votes, timeout backoff, byte bounds (admission, state transfer, the
//! future buffer) and the restore contract. Each one fails on the engine before the
//! change it covers.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

use std::sync::Arc;

use bft::certificate::{Phase, vote_bytes};
use bft::messages::{NewView, Vote};
use bft::{
    ChainId, Config, Decision, Digest, Input, Message, NullApp, Output, Proposal, Refusal, Replica,
    ReplicaId, Signer, Status, WalEntry,
};
use common::*;

fn replica_with(cfg: Config) -> Replica<NullApp> {
    let k = keys();
    let id = cfg.id;
    Replica::new(cfg, NullApp::default(), Box::new(k.signer(id)), Arc::new(k))
}

fn junk_vote(from: ReplicaId, seq: u64, digest_byte: u8) -> Input {
    let digest = Digest([digest_byte; 32]);
    let bytes = vote_bytes(&ChainId::default(), Phase::Prepare, I, 0, seq, &digest);
    msg(
        from,
        Message::Vote(Vote {
            phase: Phase::Prepare,
            instance: I,
            view: 0,
            seq,
            digest,
            signature: keys().signer(from).sign(&bytes),
        }),
    )
}

fn heartbeat(from: ReplicaId, view: u64) -> Input {
    msg(
        from,
        Message::Heartbeat {
            instance: I,
            view,
            last_decided: 0,
        },
    )
}

/// Drives `r` from `from_ms` to `to_ms` in 50 ms ticks with the leader of `view`
/// heartbeating; returns every output summary.
fn idle(r: &mut Replica<NullApp>, view: u64, from_ms: u64, to_ms: u64) -> Vec<String> {
    let leader = config(0).leader(view);
    let mut out = Vec::new();
    let mut t = from_ms;
    while t <= to_ms {
        out.extend(r.handle(heartbeat(leader, view)).iter().map(summary));
        out.extend(r.handle(Input::Tick(t)).iter().map(summary));
        t += 50;
    }
    out
}

#[test]
fn a_junk_vote_does_not_start_the_stuck_slot_timer() {
    // One Byzantine replica's validly signed vote for a digest nobody proposed.
    let mut r = replica(1);
    r.handle(Input::Tick(1));
    r.handle(junk_vote(3, 1, 0xaa));
    let out = idle(&mut r, 0, 50, 5_000);
    assert!(
        !out.iter().any(|o| o.contains("view-change")),
        "an idle cluster changed views on a junk vote: {out:?}"
    );
    assert_eq!((r.view(), r.status()), (0, Status::Normal));

    // f+1 distinct voters show a proposal exists that this replica never got: the
    // timer runs and the slot is suspected.
    let mut r = replica(1);
    r.handle(Input::Tick(1));
    r.handle(junk_vote(3, 1, 0xaa));
    r.handle(junk_vote(2, 1, 0xaa));
    let out = idle(&mut r, 0, 50, 5_000);
    assert!(out.iter().any(|o| o == "persist view-change 1"), "{out:?}");
}

#[test]
fn a_replica_counts_only_the_first_vote_of_a_phase_per_sender() {
    let p = proposal(1, &["a"]);
    let mut r = replica(1);
    r.handle(Input::Tick(1));
    r.handle(pre_prepare(0, 0, &p));
    // replica 2 first votes for junk, then for the real proposal: only the first counts,
    // so with replica 0 and this replica there is no prepare quorum yet.
    r.handle(junk_vote(2, 1, 0xbb));
    let out: Vec<String> = r
        .handle(vote(Phase::Prepare, 2, 0, &p))
        .iter()
        .map(summary)
        .collect();
    assert_eq!(out, Vec::<String>::new());
    let out: Vec<String> = r
        .handle(vote(Phase::Prepare, 0, 0, &p))
        .iter()
        .map(summary)
        .collect();
    assert_eq!(
        out,
        Vec::<String>::new(),
        "replica 2's second prepare was counted"
    );
    let out: Vec<String> = r
        .handle(vote(Phase::Prepare, 3, 0, &p))
        .iter()
        .map(summary)
        .collect();
    assert_eq!(out, ["persist prepared v0 s1", "broadcast commit v0 s1"]);
}

fn new_view(view: u64) -> Input {
    msg(
        config(0).leader(view),
        Message::NewView(Arc::new(NewView {
            instance: I,
            view,
            view_changes: vec![
                view_change(0, view, None),
                view_change(1, view, None),
                view_change(3, view, None),
            ],
        })),
    )
}

#[test]
fn timeouts_double_per_view_change_and_reset_after_progress() {
    // heartbeat timeout 500 ms (common::config)
    let mut r = replica(3);
    r.handle(Input::Tick(1));
    let out: Vec<String> = r.handle(Input::Tick(502)).iter().map(summary).collect();
    assert!(out.contains(&"persist view-change 1".to_string()), "{out:?}");
    r.handle(new_view(1));
    assert_eq!((r.view(), r.status(), r.backoff()), (1, Status::Normal, 1));
    // The leader of view 1 is silent too: the second suspicion waits twice as long.
    let out: Vec<String> = r.handle(Input::Tick(502 + 900)).iter().map(summary).collect();
    assert!(!out.iter().any(|o| o.contains("view-change")), "{out:?}");
    let out: Vec<String> = r.handle(Input::Tick(502 + 1001)).iter().map(summary).collect();
    assert!(out.contains(&"persist view-change 2".to_string()), "{out:?}");
    r.handle(new_view(2));
    assert_eq!(r.backoff(), 2);
    // A decision in a view that has worked for a full (backed-off, 4 × 1000 ms)
    // request timeout is progress: the backoff is reset. (The leader keeps
    // heartbeating meanwhile.)
    for t in (1600..6000).step_by(100) {
        r.handle(heartbeat(2, 2));
        r.handle(Input::Tick(t));
    }
    assert_eq!((r.view(), r.status()), (2, Status::Normal));
    let p = proposal(1, &["a"]);
    r.handle(msg(
        1,
        Message::SyncResponse {
            instance: I,
            decisions: vec![decision(0, &p)],
        },
    ));
    assert_eq!((r.last_decided(), r.backoff()), (1, 0));
}

#[test]
fn certificates_of_another_chain_are_rejected() {
    // Cluster B uses the same keys as cluster A (common::keys) but another chain id.
    let mut cfg = config(3);
    cfg.chain = ChainId([0xb; 32]);
    let mut r = replica_with(cfg);
    r.handle(Input::Tick(1));
    let p1 = proposal(1, &["a"]);
    r.handle(msg(
        1,
        Message::Heartbeat {
            instance: I,
            view: 0,
            last_decided: 1,
        },
    ));
    // A's sync response (certificates signed for the default chain) decides nothing.
    let out: Vec<String> = r
        .handle(msg(
            1,
            Message::SyncResponse {
                instance: I,
                decisions: vec![decision(0, &p1)],
            },
        ))
        .iter()
        .map(summary)
        .collect();
    assert!(!out.iter().any(|o| o.starts_with("deliver")), "{out:?}");
    assert_eq!(r.last_decided(), 0);
    // A's votes do not count either.
    let mut cfg = config(1);
    cfg.chain = ChainId([0xb; 32]);
    let mut r = replica_with(cfg);
    r.handle(Input::Tick(1));
    r.handle(pre_prepare(0, 0, &p1));
    r.handle(vote(Phase::Prepare, 0, 0, &p1));
    let out: Vec<String> = r
        .handle(vote(Phase::Prepare, 2, 0, &p1))
        .iter()
        .map(summary)
        .collect();
    assert_eq!(
        out,
        Vec::<String>::new(),
        "votes of another chain formed a quorum"
    );
}

fn big_decision(seq: u64, bytes: usize) -> Arc<Decision> {
    let p = Arc::new(Proposal {
        instance: I,
        seq,
        requests: vec![vec![seq as u8; bytes]],
        metadata: vec![],
    });
    decision(0, &p)
}

#[test]
fn state_transfer_responses_are_bounded_by_bytes() {
    let mut cfg = config(0);
    cfg.max_request_bytes = 4 << 20;
    cfg.sync_max_bytes = 1 << 20;
    let entries: Vec<WalEntry> = [600 << 10, 600 << 10, 2 << 20, 100, 100]
        .iter()
        .enumerate()
        .map(|(i, b)| WalEntry::Decided(big_decision(i as u64 + 1, *b)))
        .collect();
    let k = keys();
    let (mut r, _) = Replica::restore(
        cfg,
        NullApp::default(),
        Box::new(k.signer(0)),
        Arc::new(k),
        &entries,
    )
    .unwrap();
    let ask = |r: &mut Replica<NullApp>, from_seq| -> Vec<usize> {
        r.handle(msg(
            1,
            Message::SyncRequest {
                instance: I,
                from_seq,
            },
        ))
        .into_iter()
        .filter_map(|o| match o {
            Output::Send {
                msg: Message::SyncResponse { decisions, .. },
                ..
            } => Some(decisions.len()),
            _ => None,
        })
        .collect()
    };
    assert_eq!(ask(&mut r, 1), [1], "two 600 KiB decisions exceed 1 MiB");
    assert_eq!(
        ask(&mut r, 3),
        [1],
        "a decision larger than the budget still goes alone"
    );
    assert_eq!(ask(&mut r, 4), [2]);
}

#[test]
fn client_requests_are_admitted_by_bytes() {
    let mut cfg = config(1);
    cfg.max_pending_bytes = 10;
    let mut r = replica_with(cfg);
    r.handle(Input::Tick(1));
    assert!(r.handle(Input::Request(vec![1; 6])).is_empty(), "admitted");
    assert_eq!(r.pending_len(), 1);
    let out = r.handle(Input::Request(vec![2; 6]));
    assert_eq!(
        out,
        [Output::Refused {
            request: Digest::of_request(&[2; 6]),
            reason: Refusal::PoolFull
        }]
    );
    // A forwarded request over the bound is dropped without a refusal.
    let out = r.handle(msg(
        2,
        Message::Forward {
            instance: I,
            request: vec![3; 6],
        },
    ));
    assert!(out.is_empty());
    assert_eq!(r.pending_len(), 1);
}

#[test]
fn one_peer_cannot_crowd_others_out_of_the_future_buffer() {
    let p1 = proposal(1, &["a"]);
    let p2 = proposal(2, &["b"]);
    let mut r = replica(1);
    r.handle(Input::Tick(1));
    r.handle(pre_prepare(0, 0, &p1));
    // The leader's next proposal arrives early and is buffered...
    assert!(r.handle(pre_prepare(0, 0, &p2)).is_empty());
    // ...then replica 3 floods the buffer with valid votes for later sequences, and
    // replica 2 with badly signed ones (over an authenticated channel only 2 itself can
    // send votes in its name). Votes are buffered unchecked (their signatures are
    // checked when a certificate needs them), each sender in its own bounded queue.
    for seq in 2..300 {
        r.handle(junk_vote(3, seq, 0xcc));
        let mut forged = junk_vote(3, seq, 0xcd);
        if let Input::Message { from, .. } = &mut forged {
            *from = 2;
        }
        r.handle(forged);
    }
    assert!(r.future_bytes(3) <= config(1).max_future_bytes_per_peer);
    assert!(r.future_bytes(2) <= config(1).max_future_bytes_per_peer);
    assert!(r.future_bytes(0) > 0, "the leader's proposal is still buffered");
    // Deciding sequence 1 replays the leader's proposal for sequence 2.
    r.handle(vote(Phase::Prepare, 0, 0, &p1));
    r.handle(vote(Phase::Prepare, 2, 0, &p1));
    r.handle(vote(Phase::Commit, 0, 0, &p1));
    let out: Vec<String> = r
        .handle(vote(Phase::Commit, 2, 0, &p1))
        .iter()
        .map(summary)
        .collect();
    assert!(out.contains(&"persist accepted v0 s2".to_string()), "{out:?}");
}

#[test]
fn restore_refuses_an_application_ahead_of_its_wal() {
    // A decisions log (the application) at seq 3 beside an empty WAL: a fresh replica
    // would vote again on sequences 1..3.
    let k = keys();
    let app = NullApp {
        applied: 3,
        requests: 3,
        snapshots: false,
    };
    let r = Replica::restore(config(0), app, Box::new(k.signer(0)), Arc::new(k.clone()), &[]);
    assert!(matches!(r, Err(bft::Error::WalReplay { .. })));
    // Behind or equal is fine: the engine re-delivers what the application lost.
    let entries = vec![WalEntry::Decided(decision(0, &proposal(1, &["a"])))];
    let app = NullApp::default();
    let (_, outputs) =
        Replica::restore(config(0), app, Box::new(k.signer(0)), Arc::new(k), &entries).unwrap();
    assert_eq!(outputs.len(), 1);
}

#[test]
fn a_decision_is_persisted_before_it_is_delivered() {
    // The shell runs outputs in order: `Persist(Decided(d))` comes before `Deliver(d)`
    // in the same batch, so anything durable the application does on `Deliver` follows
    // the WAL (the contract of `Application::apply`).
    let p = proposal(1, &["a"]);
    let mut r = replica(1);
    r.handle(Input::Tick(1));
    let mut all = Vec::new();
    for input in [
        pre_prepare(0, 0, &p),
        vote(Phase::Prepare, 0, 0, &p),
        vote(Phase::Prepare, 2, 0, &p),
        vote(Phase::Commit, 0, 0, &p),
        vote(Phase::Commit, 2, 0, &p),
    ] {
        all.extend(r.handle(input));
    }
    let persisted = all
        .iter()
        .position(|o| matches!(o, Output::Persist(WalEntry::Decided(d)) if d.seq() == 1));
    let delivered = all
        .iter()
        .position(|o| matches!(o, Output::Deliver(d) if d.seq() == 1));
    assert!(persisted.is_some() && persisted < delivered, "{all:?}");
}

#[test]
fn the_leader_retransmits_its_proposal_only_to_replicas_that_have_not_voted() {
    let mut r = replica(0);
    r.handle(Input::Tick(1));
    r.handle(Input::Request(b"a".to_vec()));
    r.handle(Input::Request(b"b".to_vec()));
    r.handle(vote(Phase::Prepare, 1, 0, &proposal(1, &["a", "b"])));
    let out: Vec<String> = r.handle(Input::Tick(150)).iter().map(summary).collect();
    assert!(
        out.contains(&"send r2 pre-prepare v0 s1 n=2".to_string()),
        "{out:?}"
    );
    assert!(
        out.contains(&"send r3 pre-prepare v0 s1 n=2".to_string()),
        "{out:?}"
    );
    assert!(
        !out.iter()
            .any(|o| o.contains("r1 pre-prepare") || o.starts_with("broadcast pre-prepare")),
        "{out:?}"
    );
}

/// Decides `p` at follower `r` in view 0 (the leader's proposal and quorum votes).
fn decide_at(r: &mut Replica<NullApp>, p: &Arc<Proposal>) {
    r.handle(pre_prepare(0, 0, p));
    for phase in [Phase::Prepare, Phase::Commit] {
        r.handle(vote(phase, 0, 0, p));
        r.handle(vote(phase, 2, 0, p));
    }
    assert_eq!(r.last_decided(), p.seq);
}

#[test]
fn a_backlog_served_in_order_is_not_censorship_but_a_skipped_request_is() {
    // Request timeout 1000 ms. Replica 1's request "x" waits behind other requests
    // while the leader decides one every 400 ms: no complaint.
    let mut r = replica(1);
    r.handle(Input::Tick(1));
    r.handle(Input::Request(b"x".to_vec()));
    let mut seq = 0;
    for t in (100..3000).step_by(100) {
        if t % 400 == 0 {
            seq += 1;
            decide_at(&mut r, &proposal(seq, &[&format!("other-{seq}")]));
        }
        let out: Vec<String> = r.handle(Input::Tick(t)).iter().map(summary).collect();
        assert!(!out.iter().any(|o| o.contains("view-change")), "t={t}: {out:?}");
    }
    // The leader stops deciding: the request is complained about a timeout later.
    let out: Vec<String> = r.handle(Input::Tick(2800 + 1001)).iter().map(summary).collect();
    assert!(out.contains(&"persist view-change 1".to_string()), "{out:?}");

    // "y" arrived after "x" and was decided first: "x" was skipped, its clock runs
    // from its arrival however busy the leader is.
    let mut r = replica(1);
    r.handle(Input::Tick(1));
    r.handle(Input::Request(b"x".to_vec()));
    r.handle(Input::Tick(10));
    r.handle(Input::Request(b"y".to_vec()));
    r.handle(Input::Tick(400));
    decide_at(&mut r, &proposal(1, &["y"]));
    r.handle(Input::Tick(800));
    decide_at(&mut r, &proposal(2, &["z"]));
    let out: Vec<String> = r.handle(Input::Tick(1002)).iter().map(summary).collect();
    assert!(out.contains(&"persist view-change 1".to_string()), "{out:?}");
}
