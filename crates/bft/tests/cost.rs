//! The cost of a decision, counted by the engine (`Replica::counters`): messages,
//! signatures made and verified, WAL entries and syncs, for a fault-free cluster of
//! four replicas in one process. A change that makes a decision cost more fails here
//! (docs/bft.md "What a decision costs").

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bft::crypto::TestKeys;
use bft::{Config, Counters, Input, Message, NullApp, Output, Replica, ReplicaId};

const N: u32 = 4;

struct Cluster {
    replicas: Vec<Replica<NullApp>>,
    queue: VecDeque<(ReplicaId, ReplicaId, Message)>,
    delivered: Vec<u64>,
    /// Messages sent, by kind (one per addressee).
    kinds: BTreeMap<&'static str, u64>,
    now: u64,
}

fn kind(m: &Message) -> &'static str {
    match m {
        Message::Forward { .. } => "forward",
        Message::PrePrepare { .. } => "pre-prepare",
        Message::Vote(_) => "vote",
        Message::Heartbeat { .. } => "heartbeat",
        Message::Checkpoint(_) => "checkpoint",
        _ => "other",
    }
}

impl Cluster {
    fn new(tune: impl Fn(&mut Config)) -> Cluster {
        let keys = TestKeys::new(25);
        let replicas = (0..N)
            .map(|id| {
                let mut cfg = Config::new(id, N);
                tune(&mut cfg);
                Replica::new(
                    cfg,
                    NullApp::default(),
                    Box::new(keys.signer(id)),
                    Arc::new(keys.clone()),
                )
            })
            .collect();
        let mut c = Cluster {
            replicas,
            queue: VecDeque::new(),
            delivered: vec![0; N as usize],
            kinds: BTreeMap::new(),
            now: 0,
        };
        c.tick_all(); // starts the clocks
        c
    }

    fn route(&mut self, from: ReplicaId, outputs: Vec<Output>) {
        for o in outputs {
            match o {
                Output::Send { to, msg } => {
                    *self.kinds.entry(kind(&msg)).or_default() += 1;
                    self.queue.push_back((from, to, msg));
                }
                Output::Broadcast(msg) => {
                    for to in (0..N).filter(|t| *t != from) {
                        *self.kinds.entry(kind(&msg)).or_default() += 1;
                        self.queue.push_back((from, to, msg.clone()));
                    }
                }
                Output::Deliver(_) => self.delivered[from as usize] += 1,
                _ => {}
            }
        }
    }

    /// Delivers every queued message (in order, no loss, no delay).
    fn drain(&mut self) {
        while let Some((from, to, msg)) = self.queue.pop_front() {
            let r = &mut self.replicas[to as usize];
            r.advance_clock(self.now);
            let out = r.handle(Input::Message { from, msg });
            self.route(to, out);
        }
    }

    fn tick_all(&mut self) {
        for id in 0..N {
            let out = self.replicas[id as usize].handle(Input::Tick(self.now));
            self.route(id, out);
        }
        self.drain();
    }

    fn submit(&mut self, to: ReplicaId, request: Vec<u8>) {
        let r = &mut self.replicas[to as usize];
        r.advance_clock(self.now);
        let out = r.handle(Input::Request(request));
        self.route(to, out);
        self.drain();
    }

    fn total(&self) -> Counters {
        let mut t = Counters::default();
        for r in &self.replicas {
            let c = r.counters();
            t.messages_in += c.messages_in;
            t.messages_out += c.messages_out;
            t.signatures_made += c.signatures_made;
            t.signatures_verified += c.signatures_verified;
            t.wal_entries += c.wal_entries;
            t.wal_syncs += c.wal_syncs;
            t.decisions += c.decisions;
        }
        t
    }
}

fn request(i: u64) -> Vec<u8> {
    let mut r = vec![7u8; 200];
    r[..8].copy_from_slice(&i.to_le_bytes());
    r
}

/// Whole-cluster counts per decision (every replica's work added up).
#[derive(Debug, PartialEq)]
struct PerDecision {
    messages: f64,
    signatures_made: f64,
    signatures_verified: f64,
    wal_entries: f64,
    wal_syncs: f64,
}

fn per_decision(before: Counters, after: Counters, decisions: u64) -> PerDecision {
    let d = decisions as f64;
    PerDecision {
        messages: (after.messages_out - before.messages_out) as f64 / d,
        signatures_made: (after.signatures_made - before.signatures_made) as f64 / d,
        signatures_verified: (after.signatures_verified - before.signatures_verified) as f64 / d,
        wal_entries: (after.wal_entries - before.wal_entries) as f64 / d,
        wal_syncs: (after.wal_syncs - before.wal_syncs) as f64 / d,
    }
}

/// The protocol alone: one request at a time to the leader, batch of one, no clock.
/// Per decision the leader sends its pre-prepare, prepare and commit to three peers
/// (9 messages), each follower its prepare and commit (6): 27. Every replica signs a
/// prepare and a commit (8), persists `Accepted`, `Prepared` and `Decided` with a
/// sync each (12), and verifies the other replicas' votes it needs for the two
/// certificates: two prepares and two commits each (16).
#[test]
fn a_decision_costs_what_the_protocol_needs() {
    let mut c = Cluster::new(|cfg| cfg.max_batch_count = 1);
    const DECISIONS: u64 = 50;
    let before = c.total();
    for i in 0..DECISIONS {
        c.submit(0, request(i));
    }
    assert_eq!(
        c.delivered,
        vec![DECISIONS; N as usize],
        "every replica decides each one"
    );
    let after = c.total();
    assert_eq!(after.decisions - before.decisions, DECISIONS * u64::from(N));
    assert_eq!(
        after.messages_in - before.messages_in,
        after.messages_out - before.messages_out
    );
    let cost = per_decision(before, after, DECISIONS);
    println!("protocol only, whole cluster per decision: {cost:?}");
    assert_eq!(
        cost,
        PerDecision {
            messages: 27.0,
            signatures_made: 8.0,
            signatures_verified: 16.0,
            wal_entries: 12.0,
            wal_syncs: 12.0,
        }
    );
    // Per replica: no follower verifies more than the q − 1 = 2 votes of each phase.
    for r in &c.replicas[1..] {
        assert_eq!(
            r.counters().signatures_verified,
            4 * DECISIONS,
            "replica {}",
            r.id()
        );
    }
}

/// What a lightly loaded Arma-like cluster sends per decision, by kind, over ten
/// seconds: the clock runs (heartbeats every 200 ms), and every request is submitted to
/// every replica, as batchers send their BAFs to every consenter: six requests every
/// 140 ms. The leader cuts a batch `batch_interval_ms` after its oldest request.
fn light_load(batch_interval_ms: u64) -> (u64, PerDecision, BTreeMap<&'static str, f64>) {
    let mut c = Cluster::new(|cfg| {
        cfg.batch_interval_ms = batch_interval_ms;
        cfg.heartbeat_interval_ms = 200;
        cfg.heartbeat_timeout_ms = 2_000;
    });
    let mut next_request = 0u64;
    let mut run = |c: &mut Cluster, until: u64| {
        while c.now < until {
            c.now += 10;
            if c.now.is_multiple_of(140) {
                for _ in 0..6 {
                    for to in 0..N {
                        c.submit(to, request(next_request));
                    }
                    next_request += 1;
                }
            }
            c.tick_all();
        }
    };
    // Warm up for a second, then count ten seconds.
    run(&mut c, 1_000);
    let before = c.total();
    let kinds_before = c.kinds.clone();
    run(&mut c, 11_000);
    let after = c.total();
    let decisions = (after.decisions - before.decisions) / u64::from(N);
    let cost = per_decision(before, after, decisions);
    let by_kind = c
        .kinds
        .iter()
        .map(|(k, v)| {
            (
                *k,
                (v - kinds_before.get(k).copied().unwrap_or(0)) as f64 / decisions as f64,
            )
        })
        .collect();
    (decisions, cost, by_kind)
}

/// About seven decisions a second (a batch cut 100 ms after its oldest request), as
/// measured on a 4 × 2 network at 100 tx/s: the protocol's 27 messages and nothing
/// else. No forwards (the leader holds every request already; before, each follower
/// forwarded each of the six requests: 18), and no heartbeats (a replica's heartbeat
/// is due one interval after its last vote, and decisions come faster; before: 8.5).
#[test]
fn a_lightly_loaded_cluster_spends_little_besides_the_decisions() {
    let (decisions, cost, by_kind) = light_load(100);
    println!(
        "light load, batch interval 100 ms: {decisions} decisions in 10 s; {cost:?}; by kind {by_kind:?}"
    );
    assert!(decisions >= 65, "{decisions} decisions in 10 s");
    assert_eq!(by_kind.get("forward"), None, "{by_kind:?}");
    assert_eq!(by_kind.get("pre-prepare"), Some(&3.0), "{by_kind:?}");
    assert_eq!(by_kind.get("vote"), Some(&24.0), "{by_kind:?}");
    assert!(by_kind.get("heartbeat").is_none_or(|h| *h < 0.5), "{by_kind:?}");
    assert_eq!(
        cost.messages,
        27.0 + by_kind.get("heartbeat").copied().unwrap_or(0.0)
    );
    assert_eq!(cost.signatures_made, 8.0, "{cost:?}");
    assert_eq!(cost.signatures_verified, 16.0, "{cost:?}");
    assert_eq!(cost.wal_syncs, 12.0, "{cost:?}");
}

/// About 3.6 decisions a second (a batch cut 200 ms after its oldest request): no
/// forwards (before: 35.5), and heartbeats between decisions, which come further apart
/// than a heartbeat interval (12 per decision; before: 16.7).
#[test]
fn a_slower_cluster_still_sends_no_forwards() {
    let (decisions, cost, by_kind) = light_load(200);
    println!(
        "light load, batch interval 200 ms: {decisions} decisions in 10 s; {cost:?}; by kind {by_kind:?}"
    );
    assert!(decisions >= 30, "{decisions} decisions in 10 s");
    assert_eq!(by_kind.get("forward"), None, "{by_kind:?}");
    assert_eq!(by_kind.get("vote"), Some(&24.0), "{by_kind:?}");
    assert!(
        by_kind.get("heartbeat").is_some_and(|h| *h <= 12.0),
        "{by_kind:?}"
    );
    assert_eq!(cost.signatures_verified, 16.0, "{cost:?}");
}

/// CPU time of this thread in milliseconds (Linux: utime + stime of
/// `/proc/thread-self/stat`, in clock ticks of 10 ms).
fn thread_cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("linux");
    let after_name = &stat[stat.rfind(')').expect("stat") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of the stat line (utime, stime) are 12 and 13 after the name.
    let ticks: u64 = fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks as f64 * 10.0
}

/// CPU per decision of the whole cluster with real Ed25519 keys, measured as this
/// thread's CPU time (robust to other load on the machine, unlike wall time). Run
/// with `cargo test --release -p bft --test cost -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check: run in release"]
fn cpu_per_decision_ed25519() {
    for (batch, decisions) in [(1usize, 2_000u64), (100, 1_000)] {
        let (signers, verifier) = bft::crypto::ed25519_keys(1, N);
        let verifier: Arc<dyn bft::Verifier> = Arc::new(verifier);
        let replicas = signers
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let mut cfg = Config::new(i as ReplicaId, N);
                cfg.max_batch_count = batch;
                Replica::new(cfg, NullApp::default(), Box::new(s), verifier.clone())
            })
            .collect();
        let mut c = Cluster {
            replicas,
            queue: VecDeque::new(),
            delivered: vec![0; N as usize],
            kinds: BTreeMap::new(),
            now: 0,
        };
        let mut next = 0u64;
        let start = thread_cpu_ms();
        for _ in 0..decisions {
            for _ in 0..batch {
                let r = &mut c.replicas[0];
                let out = r.handle(Input::Request(request(next)));
                next += 1;
                c.route(0, out);
            }
            c.drain();
        }
        let cpu = thread_cpu_ms() - start;
        assert_eq!(c.delivered, vec![decisions; N as usize]);
        println!(
            "n = {N}, batch {batch}: {:.3} ms CPU per decision (whole cluster, {decisions} decisions)",
            cpu / decisions as f64
        );
    }
}
