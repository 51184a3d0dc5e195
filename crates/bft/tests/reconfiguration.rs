//! Replica sets that change at a decision (docs/bft.md "Reconfiguration"): a cluster
//! on a lossless in-test network whose application switches sets when it applies a
//! `reconf` request. Replicas keep one stable index across sets (a set of n replicas
//! is the indexes `0..n`), so a set grows by its next index and shrinks by its last.
//!
//! Checked: every replica switches at the same decision; that decision is certified by
//! the old set and every later one by the new set only; a joining replica follows by
//! state transfer, then votes (the new quorum needs it); a leaving replica stops
//! taking part and refuses requests; a replica restarted from its WAL after a switch
//! comes back in the new set.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::VecDeque;
use std::sync::Arc;

use bft::crypto::TestKeys;
use bft::{
    Application, ChainId, Config, Decision, Input, MemWal, Membership, Message, Output, Proposal,
    ProposalContext, Refusal, Replica, ReplicaId, Seq, Wal, verify_decision,
};

/// One replica set: its members' stable ids and the secret its keys derive from.
#[derive(Clone, Copy, Debug)]
struct Set {
    members: &'static [u32],
    keys: u64,
}

const IDS: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

impl Set {
    /// Replicas `0..n`.
    fn of(n: u32, keys: u64) -> Set {
        Set {
            members: &IDS[..n as usize],
            keys,
        }
    }

    fn members(&self) -> bft::Members {
        bft::Members::new(self.members.to_vec()).unwrap()
    }
}

fn chain_of(epoch: u64) -> ChainId {
    let mut c = [0xc0; 32];
    c[..8].copy_from_slice(&epoch.to_le_bytes());
    ChainId(c)
}

/// The id the set of `epoch` signs under.
fn signing_chain(epoch: u64) -> ChainId {
    bft::set_chain(chain_of(epoch), epoch)
}

/// Applies decisions; a request starting with `reconf` moves to the next set.
#[derive(Clone)]
struct ReconfApp {
    node: u32,
    sets: Arc<Vec<Set>>,
    epoch: u64,
    applied: Seq,
    requests: Vec<Vec<u8>>,
    /// Offers snapshots (so the engine checkpoints and prunes).
    snapshots: bool,
}

impl ReconfApp {
    fn new(node: u32, sets: &Arc<Vec<Set>>) -> ReconfApp {
        ReconfApp {
            node,
            sets: sets.clone(),
            epoch: 0,
            applied: 0,
            requests: Vec::new(),
            snapshots: false,
        }
    }
}

impl Application for ReconfApp {
    fn assemble(&mut self, _ctx: ProposalContext, _requests: &[Vec<u8>]) -> Vec<u8> {
        Vec::new()
    }
    fn verify_proposal(&mut self, proposal: &Proposal) -> bool {
        proposal.seq == self.applied + 1
    }
    fn apply(&mut self, decision: &Decision) {
        assert_eq!(decision.seq(), self.applied + 1, "applied out of order");
        self.applied = decision.seq();
        for r in &decision.proposal.requests {
            if r.starts_with(b"reconf") && (self.epoch as usize) + 1 < self.sets.len() {
                self.epoch += 1;
            }
            self.requests.push(r.clone());
        }
    }
    fn applied(&self) -> Seq {
        self.applied
    }
    fn epoch(&self) -> u64 {
        self.epoch
    }
    fn membership(&mut self) -> Option<Membership> {
        Some(set_of(self.node, &self.sets, self.epoch))
    }
    fn membership_from(&mut self, decision: &Decision, epoch: u64) -> Option<Membership> {
        let reconf = decision
            .proposal
            .requests
            .iter()
            .any(|r| r.starts_with(b"reconf"));
        (reconf && (epoch as usize) < self.sets.len()).then(|| set_of(self.node, &self.sets, epoch))
    }
    fn snapshot(&self) -> Option<Vec<u8>> {
        self.snapshots
            .then(|| [self.applied.to_le_bytes(), self.epoch.to_le_bytes()].concat())
    }
    fn install_snapshot(&mut self, seq: Seq, snapshot: &[u8]) -> bool {
        let (Some(a), Some(e)) = (snapshot.get(..8), snapshot.get(8..16)) else {
            return false;
        };
        if u64::from_le_bytes(a.try_into().unwrap()) != seq {
            return false;
        }
        self.applied = seq;
        self.epoch = u64::from_le_bytes(e.try_into().unwrap());
        self.requests.clear();
        true
    }
}

fn set_of(node: u32, sets: &[Set], epoch: u64) -> Membership {
    let set = sets[epoch as usize];
    let keys = TestKeys::new(set.keys);
    let member = set.members.contains(&node);
    Membership {
        epoch,
        chain: chain_of(epoch),
        members: set.members(),
        id: Some(node),
        verifier: Arc::new(keys.clone()),
        signer: member.then(|| Box::new(keys.signer(node)) as Box<dyn bft::Signer>),
        params: None,
    }
}

/// Checkpoint every this many decisions (0: never) in the clusters built next.
fn config(node: u32, n: u32) -> Config {
    config_with(node, n, 0)
}

fn config_with(node: u32, n: u32, checkpoint_interval: u64) -> Config {
    let mut c = Config::new(node, n);
    c.chain = chain_of(0);
    c.max_batch_count = 4;
    c.batch_interval_ms = 5;
    c.request_timeout_ms = 1_000;
    c.heartbeat_interval_ms = 50;
    c.heartbeat_timeout_ms = 300;
    c.view_change_timeout_ms = 300;
    c.checkpoint_interval = checkpoint_interval;
    c.retain_decisions = 0;
    c
}

/// Replicas `0..total` over a lossless network; `down` ones receive nothing.
struct Cluster {
    sets: Arc<Vec<Set>>,
    nodes: Vec<Option<Replica<ReconfApp>>>,
    wals: Vec<MemWal>,
    delivered: Vec<Vec<Arc<Decision>>>,
    refused: Vec<Vec<Refusal>>,
    queue: VecDeque<(ReplicaId, ReplicaId, Message)>,
    now: u64,
    checkpoint_interval: u64,
}

impl Cluster {
    fn new(sets: Vec<Set>, total: u32) -> Cluster {
        Cluster::with_checkpoints(sets, total, 0)
    }

    fn with_checkpoints(sets: Vec<Set>, total: u32, checkpoint_interval: u64) -> Cluster {
        let sets = Arc::new(sets);
        let first = sets[0];
        let keys = TestKeys::new(first.keys);
        let nodes = (0..total)
            .map(|i| {
                let mut app = ReconfApp::new(i, &sets);
                app.snapshots = checkpoint_interval > 0;
                Some(Replica::new(
                    config_with(i, first.members.len() as u32, checkpoint_interval),
                    app,
                    Box::new(keys.signer(i)),
                    Arc::new(keys.clone()),
                ))
            })
            .collect();
        Cluster {
            sets,
            nodes,
            wals: vec![MemWal::default(); total as usize],
            delivered: vec![Vec::new(); total as usize],
            refused: vec![Vec::new(); total as usize],
            queue: VecDeque::new(),
            now: 0,
            checkpoint_interval,
        }
    }

    fn execute(&mut self, i: usize, outputs: Vec<Output>) {
        let members: Vec<u32> = self.nodes[i]
            .as_ref()
            .map_or_else(Vec::new, |r| r.members().ids().to_vec());
        for o in outputs {
            match o {
                Output::Persist(e) => self.wals[i].append(&[e]).unwrap(),
                Output::Send { to, msg } => self.queue.push_back((i as u32, to, msg)),
                Output::Broadcast(msg) => {
                    for to in members.iter().copied().filter(|t| *t != i as u32) {
                        self.queue.push_back((i as u32, to, msg.clone()));
                    }
                }
                Output::Deliver(d) => self.delivered[i].push(d),
                Output::Refused { reason, .. } => self.refused[i].push(reason),
                Output::Installed { .. } | Output::ViewInstalled { .. } => {}
            }
        }
    }

    fn input(&mut self, i: usize, input: Input) {
        let Some(r) = self.nodes[i].as_mut() else {
            return;
        };
        let out = r.handle(input);
        self.execute(i, out);
    }

    fn submit(&mut self, request: &str) {
        for i in 0..self.nodes.len() {
            self.input(i, Input::Request(request.as_bytes().to_vec()));
        }
    }

    /// Runs `ms` of virtual time: every message is delivered, then the clock ticks.
    fn run(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            let mut budget = 100_000;
            while let Some((from, to, msg)) = self.queue.pop_front() {
                budget -= 1;
                assert!(budget > 0, "message storm");
                if (to as usize) < self.nodes.len() {
                    self.input(to as usize, Input::Message { from, msg });
                }
            }
            self.now += 5;
            for i in 0..self.nodes.len() {
                self.input(i, Input::Tick(self.now));
            }
        }
    }

    fn crash(&mut self, i: usize) {
        self.nodes[i] = None;
    }

    /// Restarts replica `i` from its WAL with a fresh application (which the restore
    /// brings back by replaying the WAL's decisions).
    fn restart(&mut self, i: usize) {
        let first = self.sets[0];
        let keys = TestKeys::new(first.keys);
        let mut app = ReconfApp::new(i as u32, &self.sets);
        app.snapshots = self.checkpoint_interval > 0;
        let (r, out) = Replica::restore(
            config_with(i as u32, first.members.len() as u32, self.checkpoint_interval),
            app,
            Box::new(keys.signer(i as u32)),
            Arc::new(keys),
            &self.wals[i].entries,
        )
        .expect("restore");
        self.delivered[i].clear();
        self.nodes[i] = Some(r);
        self.execute(i, out);
    }

    fn replica(&self, i: usize) -> &Replica<ReconfApp> {
        self.nodes[i].as_ref().expect("running")
    }

    /// The decision at which replica `i` switched to `epoch` (the one holding the
    /// `epoch`-th `reconf`).
    fn switch_seq(&self, i: usize, epoch: u64) -> Seq {
        let mut seen = 0;
        for d in &self.delivered[i] {
            if d.proposal.requests.iter().any(|r| r.starts_with(b"reconf")) {
                seen += 1;
                if seen == epoch {
                    return d.seq();
                }
            }
        }
        panic!("replica {i} did not switch to epoch {epoch}");
    }

    fn assert_certified_by_their_sets(&self, i: usize) {
        let mut epoch = 0u64;
        for d in &self.delivered[i] {
            let set = self.sets[epoch as usize];
            let keys = TestKeys::new(set.keys);
            verify_decision(d, &signing_chain(epoch), &keys, &set.members())
                .unwrap_or_else(|e| panic!("decision {} not certified by set {epoch}: {e}", d.seq()));
            if epoch > 0 {
                let old = self.sets[epoch as usize - 1];
                assert!(
                    verify_decision(
                        d,
                        &signing_chain(epoch - 1),
                        &TestKeys::new(old.keys),
                        &old.members()
                    )
                    .is_err(),
                    "decision {} also passes as the old set's",
                    d.seq()
                );
            }
            if d.proposal.requests.iter().any(|r| r.starts_with(b"reconf")) {
                epoch += 1;
            }
        }
    }

    fn assert_agree(&self, replicas: &[usize]) {
        let first = &self.delivered[replicas[0]];
        for &i in replicas {
            let a: Vec<_> = first.iter().map(|d| d.certificate.digest).collect();
            let b: Vec<_> = self.delivered[i].iter().map(|d| d.certificate.digest).collect();
            let k = a.len().min(b.len());
            assert_eq!(a[..k], b[..k], "replicas {} and {i} disagree", replicas[0]);
        }
    }
}

fn decided_requests(c: &Cluster, i: usize) -> Vec<String> {
    c.replica(i)
        .app()
        .requests
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect()
}

#[test]
fn a_fifth_replica_joins_follows_by_state_transfer_and_its_vote_counts() {
    let mut c = Cluster::new(vec![Set::of(4, 1), Set::of(5, 1)], 5);
    assert!(!c.replica(4).is_member(), "not in the first set");
    for k in 0..6 {
        c.submit(&format!("a{k}"));
    }
    c.run(200);
    c.submit("reconf-add-4");
    c.run(300);
    let d = c.switch_seq(0, 1);
    for i in 0..5 {
        assert_eq!(c.replica(i).epoch(), 1, "replica {i} switched");
        assert_eq!(
            c.replica(i).epoch_start(),
            d,
            "replica {i} switched at the same decision"
        );
        assert_eq!(c.switch_seq(i, 1), d);
        assert_eq!(c.replica(i).config().n(), 5);
    }
    assert!(c.replica(4).is_member(), "a member from the switch on");
    // With 5 replicas the quorum is 4: with replica 0 down, the other three cannot
    // decide without the new one.
    c.crash(0);
    for k in 0..6 {
        c.submit(&format!("b{k}"));
    }
    c.run(3_000);
    for i in 1..5 {
        let reqs = decided_requests(&c, i);
        for k in 0..6 {
            assert!(
                reqs.contains(&format!("b{k}")),
                "replica {i} decided b{k}: {reqs:?}"
            );
        }
        c.assert_certified_by_their_sets(i);
    }
    c.assert_agree(&[1, 2, 3, 4]);
    let last = c.delivered[4].last().expect("decided").clone();
    let voters: Vec<u32> = last.certificate.signatures.iter().map(|(id, _)| *id).collect();
    assert!(
        voters.contains(&4),
        "the new replica's commit is in the certificate: {voters:?}"
    );
}

#[test]
fn a_leaving_replica_stops_taking_part_and_refuses_requests() {
    let mut c = Cluster::new(vec![Set::of(5, 7), Set::of(4, 7)], 5);
    for k in 0..3 {
        c.submit(&format!("a{k}"));
    }
    c.submit("reconf-remove-4");
    c.run(400);
    let d = c.switch_seq(0, 1);
    for i in 0..5 {
        assert_eq!(c.replica(i).epoch_start(), d);
    }
    assert!(!c.replica(4).is_member());
    c.submit("b0");
    assert_eq!(c.refused[4], vec![Refusal::NotMember]);
    c.run(500);
    for i in 0..4 {
        assert!(decided_requests(&c, i).contains(&"b0".to_string()));
        c.assert_certified_by_their_sets(i);
    }
    // The leaver's messages would not count: it votes, proposes and gossips no more
    // (ticks included); it only asks for decisions (state transfer).
    let out = c.nodes[4].as_mut().unwrap().handle(Input::Tick(c.now + 10_000));
    assert!(
        out.iter().all(|o| matches!(
            o,
            Output::Send {
                msg: Message::SyncRequest { .. },
                ..
            }
        )),
        "a non-member sent {out:?}"
    );
    assert!(c.replica(4).last_decided() >= d);
}

#[test]
fn rotated_keys_certify_every_decision_after_the_switch_and_the_old_keys_none() {
    let mut c = Cluster::new(vec![Set::of(4, 3), Set::of(4, 4), Set::of(4, 5)], 4);
    c.submit("a0");
    c.submit("reconf-rotate-1");
    c.run(200);
    c.submit("b0");
    c.submit("reconf-rotate-2");
    c.run(200);
    c.submit("c0");
    c.run(300);
    for i in 0..4 {
        assert_eq!(c.replica(i).epoch(), 2);
        assert!(decided_requests(&c, i).contains(&"c0".to_string()));
        c.assert_certified_by_their_sets(i);
    }
    c.assert_agree(&[0, 1, 2, 3]);
    assert!(c.switch_seq(0, 1) < c.switch_seq(0, 2));
}

#[test]
fn a_replica_restarted_after_the_switch_comes_back_in_the_new_set() {
    let mut c = Cluster::new(vec![Set::of(4, 9), Set::of(4, 10)], 4);
    c.submit("a0");
    c.submit("reconf-rotate");
    c.run(300);
    let d = c.switch_seq(2, 1);
    c.crash(2);
    c.restart(2);
    assert_eq!(c.replica(2).epoch(), 1);
    assert_eq!(c.replica(2).epoch_start(), d);
    assert_eq!(c.replica(2).config().chain, signing_chain(1));
    // It votes with its new key: with replica 3 down, 0, 1 and 2 make the quorum.
    c.crash(3);
    c.submit("b0");
    c.run(3_000);
    for i in 0..3 {
        assert!(decided_requests(&c, i).contains(&"b0".to_string()), "replica {i}");
        c.assert_certified_by_their_sets(i);
    }
    let last = c.delivered[0].last().expect("decided").clone();
    assert!(last.certificate.signatures.iter().any(|(id, _)| *id == 2));
}

/// A cluster of 4 that switched keys once, and replica 0's WAL without its `Switched`
/// entry.
fn switched_and_wal_without_the_switch() -> (Cluster, Vec<bft::WalEntry>) {
    let mut c = Cluster::new(vec![Set::of(4, 1), Set::of(4, 2)], 4);
    c.submit("reconf");
    c.run(300);
    assert_eq!(c.replica(0).epoch(), 1);
    let entries: Vec<_> = c.wals[0]
        .entries
        .iter()
        .filter(|e| !matches!(e, bft::WalEntry::Switched { .. }))
        .cloned()
        .collect();
    (c, entries)
}

/// Restores replica 0 from `entries` with `app`, built in the first set.
fn restore_replica_0(
    app: ReconfApp,
    entries: &[bft::WalEntry],
) -> bft::Result<(Replica<ReconfApp>, Vec<Output>)> {
    let keys = TestKeys::new(1);
    Replica::restore(
        config(0, 4),
        app,
        Box::new(keys.signer(0)),
        Arc::new(keys),
        entries,
    )
}

#[test]
fn a_switch_lost_with_the_tail_of_the_wal_is_made_again_by_the_replay() {
    // The WAL lost its `Switched` entry with the tail of a batch: the application,
    // behind the decision, replays it and switches again.
    let (c, entries) = switched_and_wal_without_the_switch();
    let (r, out) = restore_replica_0(ReconfApp::new(0, &c.sets), &entries).expect("restored");
    assert_eq!(r.epoch(), 1);
    assert_eq!(r.config().chain, signing_chain(1));
    let persist = out
        .iter()
        .position(|o| matches!(o, Output::Persist(bft::WalEntry::Switched { epoch: 1, .. })))
        .expect("the switch is persisted again");
    let deliver = out
        .iter()
        .position(|o| matches!(o, Output::Deliver(d) if d.seq() == r.epoch_start()))
        .expect("the switch decision is delivered");
    assert!(persist < deliver, "persisted before it is delivered");
}

#[test]
fn a_wal_that_does_not_know_the_applications_set_is_refused() {
    // The application applied the switch, the WAL says nothing of it: the replica
    // would not know where its views start.
    let (c, entries) = switched_and_wal_without_the_switch();
    let Err(e) = restore_replica_0(c.replica(0).app().clone(), &entries) else {
        panic!("restored without the switch");
    };
    assert!(e.to_string().contains("epoch"), "{e}");
}

#[test]
fn a_replica_behind_two_switches_crosses_them_with_a_snapshot_and_the_switch_proofs() {
    let sets = vec![Set::of(4, 21), Set::of(4, 22), Set::of(4, 23)];
    let mut c = Cluster::with_checkpoints(sets, 4, 2);
    // Replica 3 is down from the start; the others decide, switch twice, checkpoint
    // and prune every decision below their checkpoints.
    c.crash(3);
    for (k, r) in [
        "a0", "a1", "reconf-1", "b0", "b1", "b2", "reconf-2", "c0", "c1", "c2", "c3",
    ]
    .iter()
    .enumerate()
    {
        c.submit(r);
        if k % 2 == 1 {
            c.run(100);
        }
    }
    c.run(500);
    assert_eq!(c.replica(0).epoch(), 2);
    let stable = c.replica(0).stable_checkpoint().expect("a stable checkpoint").seq;
    assert!(
        stable > c.switch_seq(0, 2),
        "checkpoint {stable} after the second switch"
    );
    assert!(
        c.replica(0).decision(1).is_none(),
        "the early decisions are pruned: replica 3 cannot catch up by decisions"
    );
    assert_eq!(c.replica(0).switch_proofs().count(), 2);
    // Replica 3 comes back from its empty WAL in the first set.
    c.restart(3);
    assert_eq!(c.replica(3).epoch(), 0);
    c.run(1_000);
    assert_eq!(c.replica(3).epoch(), 2, "crossed both switches");
    assert!(c.replica(3).is_member());
    assert!(c.replica(3).last_decided() >= stable);
    assert_eq!(
        c.replica(3).switch_proofs().count(),
        2,
        "keeps the proofs for others"
    );
    // Its votes count in the newest set: with replica 0 down, 1, 2 and 3 decide.
    c.crash(0);
    c.submit("d0");
    c.run(3_000);
    for i in 1..4 {
        assert!(decided_requests(&c, i).contains(&"d0".to_string()), "replica {i}");
    }
    let last = c.delivered[1].last().expect("decided").clone();
    assert!(last.certificate.signatures.iter().any(|(id, _)| *id == 3));
    verify_decision(
        &last,
        &signing_chain(2),
        &TestKeys::new(23),
        &bft::Members::contiguous(4),
    )
    .expect("certified by the newest set");
    // Restarted again, from a WAL whose switches are restated by checkpoints.
    c.restart(3);
    assert_eq!(c.replica(3).epoch(), 2);
    assert_eq!(c.replica(3).switch_proofs().count(), 2);
}

/// Replica `i` hears from `peer` that it decided up to `height` and asks it for the
/// decisions (the request a `SyncSnapshot` may answer).
fn hears_height_and_asks(c: &mut Cluster, i: usize, peer: ReplicaId, height: Seq) {
    let asked = c.nodes[i].as_mut().unwrap().handle(Input::Message {
        from: peer,
        msg: Message::Heartbeat {
            instance: bft::InstanceId(0),
            view: 0,
            last_decided: height,
        },
    });
    assert!(
        asked.iter().any(|o| matches!(
            o,
            Output::Send { to, msg: Message::SyncRequest { .. } } if *to == peer
        )),
        "replica {i} did not ask {peer}: {asked:?}"
    );
}

#[test]
fn a_forged_switch_proof_is_refused() {
    let sets = vec![Set::of(4, 31), Set::of(4, 32)];
    let mut c = Cluster::with_checkpoints(sets, 4, 2);
    c.crash(3);
    for r in ["a0", "a1", "reconf", "b0", "b1", "b2", "b3"] {
        c.submit(r);
        c.run(100);
    }
    c.run(300);
    let cp = c.replica(0).stable_checkpoint().expect("stable").clone();
    let proof = c.replica(0).switch_proofs().next().expect("a proof").clone();
    c.restart(3);
    // The switch decision with one commit signature replaced: not a quorum of set 0.
    let mut forged = Decision::clone(&proof);
    forged.certificate.signatures[0].1 = bft::Signature(vec![0; 8]);
    hears_height_and_asks(&mut c, 3, 0, cp.seq);
    let out = c.nodes[3].as_mut().unwrap().handle(Input::Message {
        from: 0,
        msg: Message::SyncSnapshot {
            checkpoint: cp.clone(),
            switches: vec![Arc::new(forged)],
        },
    });
    assert!(
        !out.iter().any(|o| matches!(o, Output::Installed { .. })),
        "installed with a forged proof"
    );
    assert_eq!(c.replica(3).epoch(), 0);
    // Without any proof the checkpoint of the new set does not verify either.
    hears_height_and_asks(&mut c, 3, 1, cp.seq);
    let out = c.nodes[3].as_mut().unwrap().handle(Input::Message {
        from: 1,
        msg: Message::SyncSnapshot {
            checkpoint: cp,
            switches: Vec::new(),
        },
    });
    assert!(!out.iter().any(|o| matches!(o, Output::Installed { .. })));
    assert_eq!(c.replica(3).last_decided(), 0);
}

#[test]
fn a_removed_replica_that_missed_its_removal_learns_it_and_refuses_requests() {
    let mut c = Cluster::new(vec![Set::of(5, 41), Set::of(4, 42)], 5);
    c.submit("a0");
    c.run(200);
    // Replica 4 is down while the set removes it.
    c.crash(4);
    c.submit("reconf-remove-4");
    c.run(300);
    c.submit("b0");
    c.run(300);
    assert_eq!(c.replica(0).epoch(), 1);
    // It comes back still a member of the old set, and the new set's members do not
    // send to it; its own heartbeats reach them.
    c.restart(4);
    assert!(c.replica(4).is_member(), "a member of the old set as it restarts");
    c.run(1_000);
    assert_eq!(c.replica(4).epoch(), 1, "it learned of the switch");
    assert!(!c.replica(4).is_member());
    c.submit("c0");
    assert_eq!(c.refused[4], vec![Refusal::NotMember]);
    c.run(300);
    for i in 0..4 {
        assert!(decided_requests(&c, i).contains(&"c0".to_string()), "replica {i}");
    }
}

const FIVE: &[u32] = &[0, 1, 2, 3, 4];
const WITHOUT_1: &[u32] = &[0, 2, 3, 4];
const WITHOUT_0: &[u32] = &[1, 2, 3, 4];
const WITHOUT_1_WITH_5: &[u32] = &[0, 2, 3, 4, 5];

/// Replica `from`'s commit vote for `p` in the set of `epoch`, signed with `keys`.
fn commit_vote(keys: u64, from: ReplicaId, epoch: u64, view: u64, p: &Proposal) -> Message {
    let d = p.digest();
    let bytes = bft::vote_bytes(
        &signing_chain(epoch),
        bft::Phase::Commit,
        p.instance,
        view,
        p.seq,
        &d,
    );
    Message::Vote(bft::Vote {
        phase: bft::Phase::Commit,
        instance: p.instance,
        view,
        seq: p.seq,
        digest: d,
        signature: bft::Signer::sign(&TestKeys::new(keys).signer(from), &bytes),
    })
}

#[test]
fn a_replica_in_the_middle_leaves_and_its_votes_never_count_again() {
    let sets = vec![
        Set {
            members: FIVE,
            keys: 51,
        },
        Set {
            members: WITHOUT_1,
            keys: 51,
        },
    ];
    let mut c = Cluster::new(sets, 5);
    for k in 0..3 {
        c.submit(&format!("a{k}"));
    }
    c.submit("reconf-remove-1");
    c.run(400);
    let d = c.switch_seq(0, 1);
    for i in 0..5 {
        assert_eq!(c.replica(i).epoch(), 1, "replica {i} switched");
        assert_eq!(
            c.replica(i).epoch_start(),
            d,
            "replica {i} switched at the same decision"
        );
        assert_eq!(c.replica(i).members().ids(), WITHOUT_1);
    }
    assert!(!c.replica(1).is_member(), "removed");
    for i in [0, 2, 3, 4] {
        assert!(c.replica(i).is_member(), "replica {i} keeps its id and its place");
        assert_eq!(c.replica(i).config().id, i as u32);
    }
    assert_eq!(c.replica(0).config().quorum().q, 3);
    c.submit("b0");
    assert_eq!(c.refused[1], vec![Refusal::NotMember]);
    // With replica 0 down, 2, 3 and 4 are a quorum of [0, 2, 3, 4]: the set's size
    // is what counts, not the highest id.
    c.crash(0);
    for k in 1..4 {
        c.submit(&format!("b{k}"));
    }
    c.run(3_000);
    for i in [2, 3, 4] {
        let reqs = decided_requests(&c, i);
        for k in 0..4 {
            assert!(
                reqs.contains(&format!("b{k}")),
                "replica {i} decided b{k}: {reqs:?}"
            );
        }
        c.assert_certified_by_their_sets(i);
    }
    for dec in c.delivered[2].iter().filter(|x| x.seq() > d) {
        assert!(
            dec.certificate.signatures.iter().all(|(id, _)| *id != 1),
            "decision {} counts the removed replica",
            dec.seq()
        );
    }
    // The removed replica still holds a valid key of the new set (keys did not
    // rotate) and signs for the new set's id: a member takes none of it.
    let next = c.replica(2).last_decided() + 1;
    let p = Proposal {
        instance: bft::InstanceId(0),
        seq: next,
        requests: vec![b"x".to_vec()],
        metadata: Vec::new(),
    };
    let view = c.replica(2).view();
    let out = c.nodes[2].as_mut().unwrap().handle(Input::Message {
        from: 1,
        msg: commit_vote(51, 1, 1, view, &p),
    });
    assert!(out.is_empty(), "a removed replica's vote had an effect: {out:?}");
    let out = c.nodes[2].as_mut().unwrap().handle(Input::Message {
        from: 1,
        msg: Message::PrePrepare {
            view,
            proposal: Arc::new(p),
        },
    });
    assert!(
        out.is_empty(),
        "a removed replica's proposal had an effect: {out:?}"
    );
}

#[test]
fn the_leader_leaving_hands_the_next_view_to_the_next_member() {
    let sets = vec![
        Set {
            members: FIVE,
            keys: 52,
        },
        Set {
            members: WITHOUT_0,
            keys: 53,
        },
    ];
    let mut c = Cluster::new(sets, 5);
    assert!(
        c.replica(0).is_leader(),
        "replica 0 leads view 0 of the first set"
    );
    c.submit("a0");
    c.submit("reconf-remove-0");
    c.run(400);
    let d = c.switch_seq(1, 1);
    for i in 0..5 {
        assert_eq!(c.replica(i).epoch_start(), d, "replica {i}");
    }
    assert!(!c.replica(0).is_member());
    assert!(
        c.replica(1).is_leader(),
        "the first member leads view 0 of the new set"
    );
    assert_eq!(c.replica(2).config().leader(1), 2);
    // Replica 4 down too: 1, 2, 3 are a quorum of four.
    c.crash(4);
    c.submit("b0");
    c.run(3_000);
    for i in 1..4 {
        assert!(decided_requests(&c, i).contains(&"b0".to_string()), "replica {i}");
        c.assert_certified_by_their_sets(i);
    }
    c.assert_agree(&[1, 2, 3]);
}

#[test]
fn a_removal_then_a_join_gives_the_joiner_an_id_never_used() {
    let sets = vec![
        Set {
            members: FIVE,
            keys: 61,
        },
        Set {
            members: WITHOUT_1,
            keys: 61,
        },
        Set {
            members: WITHOUT_1_WITH_5,
            keys: 62,
        },
    ];
    let mut c = Cluster::new(sets, 6);
    assert!(!c.replica(5).is_member());
    c.submit("a0");
    c.submit("reconf-remove-1");
    c.run(400);
    c.submit("b0");
    c.submit("reconf-add-5");
    c.run(1_000);
    for i in 0..6 {
        assert_eq!(c.replica(i).epoch(), 2, "replica {i}");
        assert_eq!(c.replica(i).members().ids(), WITHOUT_1_WITH_5);
    }
    assert!(c.replica(5).is_member() && !c.replica(1).is_member());
    // A quorum of five is four: with replica 0 down, the joiner is needed.
    c.crash(0);
    c.submit("c0");
    c.run(3_000);
    for i in 2..6 {
        assert!(decided_requests(&c, i).contains(&"c0".to_string()), "replica {i}");
        c.assert_certified_by_their_sets(i);
    }
    c.assert_agree(&[2, 3, 4, 5]);
    let last = c.delivered[5].last().expect("decided").clone();
    let voters: Vec<u32> = last.certificate.signatures.iter().map(|(id, _)| *id).collect();
    assert!(voters.contains(&5) && !voters.contains(&1), "{voters:?}");
}

#[test]
fn a_replica_restarted_after_a_removal_comes_back_with_the_member_list_and_a_wal_naming_another_is_refused() {
    let sets = vec![
        Set {
            members: FIVE,
            keys: 71,
        },
        Set {
            members: WITHOUT_1,
            keys: 72,
        },
    ];
    let mut c = Cluster::new(sets, 5);
    c.submit("a0");
    c.submit("reconf-remove-1");
    c.run(400);
    assert!(c.wals[3].entries.iter().any(|e| matches!(
        e,
        bft::WalEntry::Switched { members, .. } if members.ids() == WITHOUT_1
    )));
    c.crash(3);
    c.restart(3);
    assert_eq!(c.replica(3).members().ids(), WITHOUT_1);
    assert!(c.replica(3).is_member());
    c.crash(2);
    c.submit("b0");
    c.run(3_000);
    for i in [0, 3, 4] {
        assert!(decided_requests(&c, i).contains(&"b0".to_string()), "replica {i}");
    }
    // An application that names other members for the same epoch than the WAL did.
    let other = Arc::new(vec![
        Set {
            members: FIVE,
            keys: 71,
        },
        Set {
            members: WITHOUT_0,
            keys: 72,
        },
    ]);
    let keys = TestKeys::new(71);
    let Err(e) = Replica::restore(
        config(3, 5),
        ReconfApp::new(3, &other),
        Box::new(keys.signer(3)),
        Arc::new(keys),
        &c.wals[3].entries,
    ) else {
        panic!("restored with another member list");
    };
    assert!(e.to_string().contains("members"), "{e}");
}
