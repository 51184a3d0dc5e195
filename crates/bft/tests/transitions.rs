//! Table tests of single transitions: each case is a list of steps
//! `{ input, expected outputs }` run against one replica without any runtime.
//! Outputs are compared through a compact one-line summary of each output.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

use std::sync::Arc;

use bft::certificate::{Phase, Prepared};
use bft::messages::NewView;
use bft::{Decision, Input, InstanceId, Message, NullApp, Output, Proposal, Replica};
use common::*;

#[test]
fn follower_normal_case() {
    let p = proposal(1, &["a", "b"]);
    let r = run(
        "follower decides",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            step(
                pre_prepare(0, 0, &p),
                &["persist accepted v0 s1", "broadcast prepare v0 s1"],
            ),
            step(pre_prepare(0, 0, &p), &[]), // duplicate
            step(vote(Phase::Prepare, 0, 0, &p), &[]),
            step(vote(Phase::Prepare, 0, 0, &p), &[]), // same voter twice counts once
            step(
                vote(Phase::Prepare, 2, 0, &p),
                &["persist prepared v0 s1", "broadcast commit v0 s1"],
            ),
            step(vote(Phase::Commit, 0, 0, &p), &[]),
            step(
                vote(Phase::Commit, 3, 0, &p),
                &["persist decided s1", "deliver s1 (2 requests)"],
            ),
            step(vote(Phase::Commit, 2, 0, &p), &[]), // late vote for a decided slot
        ],
    );
    assert_eq!(r.last_decided(), 1);
    assert_eq!(r.app().requests, 2);
}

#[test]
fn votes_may_arrive_before_the_proposal() {
    let p = proposal(1, &["a"]);
    run(
        "early votes",
        replica(2),
        vec![
            step(Input::Tick(1), START),
            step(vote(Phase::Prepare, 0, 0, &p), &[]),
            step(vote(Phase::Prepare, 1, 0, &p), &[]),
            step(vote(Phase::Commit, 0, 0, &p), &[]),
            step(vote(Phase::Commit, 1, 0, &p), &[]),
            step(
                pre_prepare(0, 0, &p),
                &[
                    "persist accepted v0 s1",
                    "broadcast prepare v0 s1",
                    "persist prepared v0 s1",
                    "broadcast commit v0 s1",
                    "persist decided s1",
                    "deliver s1 (1 requests)",
                ],
            ),
        ],
    );
}

#[test]
fn leader_batches_by_count_and_by_interval() {
    run(
        "leader batching",
        replica(0),
        vec![
            step(Input::Tick(1), START),
            step(Input::Request(b"a".to_vec()), &[]),
            step(Input::Tick(5), &[]),
            step(
                Input::Tick(11),
                &[
                    "persist accepted v0 s1",
                    "broadcast pre-prepare v0 s1 n=1",
                    "broadcast prepare v0 s1",
                ],
            ),
            step(Input::Request(b"b".to_vec()), &[]), // slot busy: one sequence at a time
            step(Input::Request(b"c".to_vec()), &[]),
        ],
    );
    let p = proposal(1, &["a", "b"]);
    run(
        "leader cuts a full batch at once",
        replica(0),
        vec![
            step(Input::Tick(1), START),
            step(Input::Request(b"a".to_vec()), &[]),
            step(
                Input::Request(b"b".to_vec()),
                &[
                    "persist accepted v0 s1",
                    "broadcast pre-prepare v0 s1 n=2",
                    "broadcast prepare v0 s1",
                ],
            ),
            step(Input::Request(b"a".to_vec()), &[]), // already pending
            step(vote(Phase::Prepare, 1, 0, &p), &[]),
            step(
                vote(Phase::Prepare, 2, 0, &p),
                &["persist prepared v0 s1", "broadcast commit v0 s1"],
            ),
            step(vote(Phase::Commit, 1, 0, &p), &[]),
            step(
                vote(Phase::Commit, 2, 0, &p),
                &["persist decided s1", "deliver s1 (2 requests)"],
            ),
            step(Input::Request(b"a".to_vec()), &["refused AlreadyDecided"]), // already decided
        ],
    );
}

#[test]
fn follower_forwards_requests_and_complains_when_censored() {
    run(
        "censorship",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            // held for two batch intervals (the leader may have it already)...
            step(Input::Request(b"x".to_vec()), &[]),
            step(Input::Tick(20), &[]),
            // ...then forwarded, once
            step(Input::Tick(21), &["send r0 forward x"]),
            step(Input::Tick(90), &[]),
            // the leader keeps sending heartbeats but never orders "x"
            step(
                msg(
                    0,
                    Message::Heartbeat {
                        instance: I,
                        view: 0,
                        last_decided: 0,
                    },
                ),
                &[],
            ),
            step(
                Input::Tick(501),
                &["broadcast heartbeat v0 h0", "send r0 forward x"],
            ),
            step(
                msg(
                    0,
                    Message::Heartbeat {
                        instance: I,
                        view: 0,
                        last_decided: 0,
                    },
                ),
                &[],
            ),
            step(
                Input::Tick(1002),
                &[
                    "broadcast heartbeat v0 h0",
                    "persist view-change 1",
                    "broadcast view-change 1 prepared=None",
                ],
            ),
        ],
    );
}

#[test]
fn silent_leader_is_suspected() {
    run(
        "heartbeat timeout",
        replica(2),
        vec![
            step(Input::Tick(1), START),
            step(Input::Tick(450), &["broadcast heartbeat v0 h0"]),
            step(
                Input::Tick(502),
                &["persist view-change 1", "broadcast view-change 1 prepared=None"],
            ),
            // the timer to move beyond view 1 only starts once a quorum asked for it; a
            // replica that left view 0 re-sends its view change but no longer vouches for
            // view 0 with heartbeats
            step(Input::Tick(5000), &["broadcast view-change 1 prepared=None"]),
        ],
    );
}

#[test]
fn bad_or_equivocating_proposals_trigger_a_view_change() {
    let mut bad = Proposal::clone(&proposal(1, &["a"]));
    bad.metadata = b"rejected by the app".to_vec();
    let vc = &["persist view-change 1", "broadcast view-change 1 prepared=None"];
    run(
        "invalid proposal",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            step(pre_prepare(0, 0, &Arc::new(bad)), vc),
        ],
    );
    run(
        "duplicate request inside a proposal",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            step(pre_prepare(0, 0, &proposal(1, &["a", "a"])), vc),
        ],
    );
    run(
        "equivocation",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            step(
                pre_prepare(0, 0, &proposal(1, &["a"])),
                &["persist accepted v0 s1", "broadcast prepare v0 s1"],
            ),
            step(pre_prepare(0, 0, &proposal(1, &["b"])), vc),
        ],
    );
    run(
        "proposal from a non-leader is ignored",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            step(pre_prepare(2, 0, &proposal(1, &["a"])), &[]),
        ],
    );
}

#[test]
fn forged_votes_are_ignored() {
    let p = proposal(1, &["a"]);
    let mut forged = vote(Phase::Prepare, 2, 0, &p);
    if let Input::Message { from, .. } = &mut forged {
        *from = 3; // replica 2's signature relayed as replica 3's vote
    }
    run(
        "forged vote",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            step(
                pre_prepare(0, 0, &p),
                &["persist accepted v0 s1", "broadcast prepare v0 s1"],
            ),
            step(forged, &[]),
            step(vote(Phase::Prepare, 0, 0, &p), &[]),
            step(
                vote(Phase::Prepare, 2, 0, &p),
                &["persist prepared v0 s1", "broadcast commit v0 s1"],
            ),
        ],
    );
}

#[test]
fn join_rule_needs_f_plus_one() {
    run(
        "join the smallest higher view once f+1 ask",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            step(msg(2, Message::ViewChange(view_change(2, 5, None))), &[]),
            step(
                msg(3, Message::ViewChange(view_change(3, 3, None))),
                &["persist view-change 3", "broadcast view-change 3 prepared=None"],
            ),
        ],
    );
}

#[test]
fn new_leader_carries_the_prepared_proposal_forward() {
    // Replica 1 leads view 1. Replica 2 prepared p in view 0; the new view must
    // re-propose p although replica 1 never saw it.
    let p = proposal(1, &["carried"]);
    let prepared = Prepared {
        proposal: p.clone(),
        certificate: cert(Phase::Prepare, 0, &p, &[0, 2, 3]),
    };
    let r = run(
        "new view with a carried proposal",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            step(
                Input::Tick(502),
                &[
                    "broadcast heartbeat v0 h0",
                    "persist view-change 1",
                    "broadcast view-change 1 prepared=None",
                ],
            ),
            step(
                msg(2, Message::ViewChange(view_change(2, 1, Some(prepared)))),
                &[],
            ),
            step(
                msg(3, Message::ViewChange(view_change(3, 1, None))),
                &[
                    "broadcast new-view v1 (3 vcs)",
                    "persist new-view v1 decided=0 carried=Some(1)",
                    "installed v1 leader r1",
                    "persist accepted v1 s1",
                    "broadcast pre-prepare v1 s1 n=1",
                    "broadcast prepare v1 s1",
                ],
            ),
        ],
    );
    assert_eq!(r.view(), 1);
    assert!(r.is_leader());
}

#[test]
fn follower_enforces_the_carried_proposal() {
    let p = proposal(1, &["carried"]);
    let prepared = Prepared {
        proposal: p.clone(),
        certificate: cert(Phase::Prepare, 0, &p, &[0, 2, 3]),
    };
    let nv = Arc::new(NewView {
        instance: I,
        view: 1,
        view_changes: vec![
            view_change(0, 1, None),
            view_change(1, 1, None),
            view_change(3, 1, Some(prepared)),
        ],
    });
    let vc2 = &["persist view-change 2", "broadcast view-change 2 prepared=None"];
    run(
        "a new leader must not replace the carried proposal",
        replica(2),
        vec![
            step(Input::Tick(1), START),
            step(
                msg(1, Message::NewView(nv.clone())),
                &[
                    "persist new-view v1 decided=0 carried=Some(1)",
                    "installed v1 leader r1",
                ],
            ),
            step(pre_prepare(1, 1, &proposal(1, &["other"])), vc2),
        ],
    );
    run(
        "the carried proposal is accepted",
        replica(2),
        vec![
            step(Input::Tick(1), START),
            step(
                msg(0, Message::NewView(nv.clone())), // relayed by a non-leader: still a proof
                &[
                    "persist new-view v1 decided=0 carried=Some(1)",
                    "installed v1 leader r1",
                ],
            ),
            step(
                pre_prepare(1, 1, &p),
                &["persist accepted v1 s1", "broadcast prepare v1 s1"],
            ),
        ],
    );
    let mut short = NewView::clone(&nv);
    short.view_changes.pop();
    run(
        "a new view without a quorum is rejected",
        replica(2),
        vec![
            step(Input::Tick(1), START),
            step(msg(1, Message::NewView(Arc::new(short))), &[]),
        ],
    );
}

#[test]
fn replica_restored_from_its_wal_keeps_its_word() {
    let p = proposal(1, &["a"]);
    let mut r = replica(1);
    let mut wal = Vec::new();
    for input in [Input::Tick(1), pre_prepare(0, 0, &p)] {
        for o in r.handle(input) {
            if let Output::Persist(e) = o {
                wal.push(e);
            }
        }
    }
    let k = keys();
    let (restored, outputs) = Replica::restore(
        config(1),
        NullApp::default(),
        Box::new(k.signer(1)),
        Arc::new(k),
        &wal,
    )
    .expect("restore");
    assert!(outputs.is_empty());
    run(
        "restored replica",
        restored,
        vec![
            // it re-sends its (identical) prepare with its first heartbeat
            step(
                Input::Tick(2),
                &["broadcast heartbeat v0 h0", "broadcast prepare v0 s1"],
            ),
            // and treats another proposal for the same (view, seq) as equivocation
            step(
                pre_prepare(0, 0, &proposal(1, &["b"])),
                &["persist view-change 1", "broadcast view-change 1 prepared=None"],
            ),
        ],
    );
}

#[test]
fn lagging_replica_catches_up_by_certified_decisions() {
    let p1 = proposal(1, &["a"]);
    let p2 = proposal(2, &["b"]);
    let mut forged = Decision::clone(&decision(0, &p2));
    forged.certificate.signatures.truncate(2);
    run(
        "state transfer",
        replica(3),
        vec![
            step(Input::Tick(1), START),
            step(
                msg(
                    1,
                    Message::Heartbeat {
                        instance: I,
                        view: 0,
                        last_decided: 2,
                    },
                ),
                &["send r1 sync-request from s1"],
            ),
            step(
                msg(
                    1,
                    Message::SyncResponse {
                        instance: I,
                        decisions: vec![decision(0, &p1), Arc::new(forged)],
                    },
                ),
                &[
                    "persist decided s1",
                    "deliver s1 (1 requests)",
                    "send r1 sync-request from s2",
                ],
            ),
            step(
                msg(
                    1,
                    Message::SyncResponse {
                        instance: I,
                        decisions: vec![decision(0, &p2)],
                    },
                ),
                &["persist decided s2", "deliver s2 (1 requests)"],
            ),
            step(
                msg(
                    2,
                    Message::SyncRequest {
                        instance: I,
                        from_seq: 1,
                    },
                ),
                &["send r2 sync-response 2 decisions"],
            ),
        ],
    );
}

#[test]
fn messages_of_another_instance_are_ignored() {
    let mut p = Proposal::clone(&proposal(1, &["a"]));
    p.instance = InstanceId(1);
    run(
        "other instance",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            step(pre_prepare(0, 0, &Arc::new(p)), &[]),
        ],
    );
}

#[test]
fn a_vote_stands_in_for_a_heartbeat() {
    let p1 = proposal(1, &["a"]);
    let p5 = proposal(5, &["e"]);
    run(
        "votes as heartbeats",
        replica(1),
        vec![
            step(Input::Tick(1), START),
            // A vote of replica 2 for sequence 5 says it decided 4: ask it for them.
            step(vote(Phase::Prepare, 2, 0, &p5), &["send r2 sync-request from s1"]),
            step(Input::Tick(50), &[]),
            // This replica's own fresh vote (at 50) postpones its heartbeat (due at
            // 101) by an interval...
            step(
                pre_prepare(0, 0, &p1),
                &["persist accepted v0 s1", "broadcast prepare v0 s1"],
            ),
            step(Input::Tick(101), &[]),
            // ...after which the heartbeat (and the retransmission) is due again.
            step(Input::Tick(149), &[]),
            step(
                Input::Tick(150),
                &["broadcast heartbeat v0 h0", "broadcast prepare v0 s1"],
            ),
        ],
    );
}
