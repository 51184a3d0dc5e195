#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Checkpoints (docs/bft.md "Checkpoints"): a quorum of equal snapshot digests makes a
//! checkpoint stable; the replica then prunes its decisions, its de-duplication set and
//! its WAL; a replica behind the pruned decisions catches up by the stable checkpoint's
//! snapshot; a forged snapshot is refused; a replica restarts from a pruned WAL, also
//! when its application lost its state.

use std::collections::VecDeque;
use std::sync::Arc;

use bft::crypto::TestKeys;
use bft::{
    Config, FileWal, Input, MemWal, Message, NullApp, Output, Replica, ReplicaId, Seq, StableCheckpoint, Wal,
    WalEntry,
};

const N: u32 = 4;
const INTERVAL: u64 = 4;
const RETAIN: u64 = 2;

fn keys() -> TestKeys {
    TestKeys::new(29)
}

fn config(id: ReplicaId) -> Config {
    let mut c = Config::new(id, N);
    c.max_batch_count = 2;
    c.batch_interval_ms = 5;
    c.heartbeat_interval_ms = 50;
    c.heartbeat_timeout_ms = 400;
    c.request_timeout_ms = 2_000;
    c.view_change_timeout_ms = 400;
    c.sync_batch = std::num::NonZeroUsize::new(3).unwrap();
    c.checkpoint_interval = INTERVAL;
    c.retain_decisions = RETAIN;
    c
}

fn app() -> NullApp {
    NullApp {
        snapshots: true,
        ..NullApp::default()
    }
}

/// Four replicas on a lossless in-memory network; `cut` isolates one of them.
struct Cluster {
    replicas: Vec<Option<Replica<NullApp>>>,
    wals: Vec<MemWal>,
    queue: VecDeque<(ReplicaId, ReplicaId, Message)>,
    cut: Option<ReplicaId>,
    now: u64,
    installed: Vec<Vec<Seq>>,
    /// A replica whose entries also go to a file WAL, and how many went there.
    file: Option<(ReplicaId, FileWal, usize)>,
}

impl Cluster {
    fn new() -> Cluster {
        let k = keys();
        Cluster {
            replicas: (0..N)
                .map(|id| {
                    Some(Replica::new(
                        config(id),
                        app(),
                        Box::new(k.signer(id)),
                        Arc::new(k.clone()),
                    ))
                })
                .collect(),
            wals: vec![MemWal::default(); N as usize],
            queue: VecDeque::new(),
            cut: None,
            now: 0,
            installed: vec![Vec::new(); N as usize],
            file: None,
        }
    }

    fn replica(&self, id: ReplicaId) -> &Replica<NullApp> {
        self.replicas[id as usize].as_ref().unwrap()
    }

    fn input(&mut self, id: ReplicaId, input: Input) {
        let Some(r) = self.replicas[id as usize].as_mut() else {
            return;
        };
        let outputs = r.handle(input);
        self.execute(id, outputs);
    }

    fn execute(&mut self, id: ReplicaId, outputs: Vec<Output>) {
        for out in outputs {
            match out {
                Output::Persist(e) => {
                    if let Some((_, wal, n)) = self.file.as_mut().filter(|(f, _, _)| *f == id) {
                        wal.append(std::slice::from_ref(&e)).unwrap();
                        *n += 1;
                    }
                    self.wals[id as usize].append(&[e]).unwrap();
                }
                Output::Send { to, msg } => self.queue.push_back((id, to, msg)),
                Output::Broadcast(msg) => {
                    for to in (0..N).filter(|t| *t != id) {
                        self.queue.push_back((id, to, msg.clone()));
                    }
                }
                Output::Installed { seq, .. } => self.installed[id as usize].push(seq),
                _ => {}
            }
        }
    }

    /// Advances the clock by `ms`, delivering every message after each tick.
    fn run(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now += 5;
            for id in 0..N {
                self.input(id, Input::Tick(self.now));
            }
            while let Some((from, to, msg)) = self.queue.pop_front() {
                if self.cut.is_some_and(|c| c == from || c == to) {
                    continue;
                }
                self.input(to, Input::Message { from, msg });
            }
        }
    }

    fn submit(&mut self, requests: std::ops::Range<u32>) {
        for i in requests {
            for id in 0..N {
                if self.cut != Some(id) {
                    self.input(id, Input::Request(format!("req-{i}").into_bytes()));
                }
            }
        }
    }

    fn heights(&self) -> Vec<Seq> {
        (0..N).map(|id| self.replica(id).last_decided()).collect()
    }
}

#[test]
fn stable_checkpoints_prune_decisions_and_the_wal() {
    let mut c = Cluster::new();
    c.submit(0..40);
    c.run(3_000);
    let heights = c.heights();
    assert!(
        heights.iter().all(|h| *h >= 20),
        "40 requests in batches of 2: {heights:?}"
    );
    for id in 0..N {
        let r = c.replica(id);
        let stable = r.stable_checkpoint().expect("a stable checkpoint").seq;
        assert_eq!(stable % INTERVAL, 0);
        assert!(
            stable + INTERVAL > r.last_decided(),
            "r{id}: stable {stable}, decided {}",
            r.last_decided()
        );
        assert!(
            r.held_decisions() as u64 <= RETAIN + INTERVAL,
            "r{id} holds {} decisions",
            r.held_decisions()
        );
        // The WAL starts at a checkpoint (or a decision after one): about one interval's
        // worth of entries, not everything since genesis.
        let wal = &c.wals[id as usize].entries;
        assert!(
            matches!(
                wal.first(),
                Some(WalEntry::Checkpoint { .. } | WalEntry::Decided(_))
            ),
            "r{id}'s WAL starts with {:?}",
            wal.first()
        );
        let decided = wal.iter().filter(|e| matches!(e, WalEntry::Decided(_))).count() as u64;
        assert!(decided <= INTERVAL + 1, "r{id}'s WAL keeps {decided} decisions");
    }
}

#[test]
fn a_restart_from_a_pruned_wal_installs_the_checkpoint_when_the_application_lost_its_state() {
    let mut c = Cluster::new();
    c.submit(0..30);
    c.run(2_000);
    let decided = c.replica(2).last_decided();
    let stable = c.replica(2).stable_checkpoint().unwrap().seq;
    assert!(stable > 0);
    let k = keys();
    // The application lost everything: the WAL's checkpoint is installed, the decisions
    // after it are re-applied.
    let (r, outputs) = Replica::restore(
        config(2),
        app(),
        Box::new(k.signer(2)),
        Arc::new(k.clone()),
        &c.wals[2].entries,
    )
    .expect("restore");
    assert!(
        matches!(outputs.first(), Some(Output::Installed { seq, .. }) if *seq == stable),
        "{:?}",
        outputs.first()
    );
    assert_eq!(r.last_decided(), decided);
    assert_eq!(r.app().applied, decided);
    // An application that kept its state gets only what it lacks.
    let kept = NullApp {
        applied: decided,
        requests: 0,
        snapshots: true,
    };
    let (r, outputs) = Replica::restore(
        config(2),
        kept,
        Box::new(k.signer(2)),
        Arc::new(k),
        &c.wals[2].entries,
    )
    .expect("restore");
    assert!(outputs.is_empty(), "{outputs:?}");
    assert_eq!(r.last_decided(), decided);
}

#[test]
fn a_replica_behind_the_pruned_decisions_catches_up_by_snapshot() {
    let mut c = Cluster::new();
    c.cut = Some(3);
    c.submit(0..30);
    c.run(2_000);
    let ahead = c.replica(0).last_decided();
    assert!(ahead >= 15);
    assert_eq!(c.replica(3).last_decided(), 0);
    c.cut = None;
    c.run(2_000);
    assert!(!c.installed[3].is_empty(), "replica 3 installed no snapshot");
    assert_eq!(c.replica(3).last_decided(), c.replica(0).last_decided());
    assert_eq!(c.replica(3).app().applied, c.replica(3).last_decided());
    // And takes part from there on.
    c.submit(100..110);
    c.run(2_000);
    let heights = c.heights();
    assert!(
        heights.iter().all(|h| *h == heights[0] && *h > ahead),
        "{heights:?}"
    );
}

#[test]
fn forged_snapshots_are_refused() {
    let mut c = Cluster::new();
    c.submit(0..20);
    c.run(2_000);
    let good: Arc<StableCheckpoint> = c.replica(0).stable_checkpoint().unwrap().clone();
    let k = keys();
    let mut fresh = Replica::new(config(3), app(), Box::new(k.signer(3)), Arc::new(k));
    let snapshot_from_1 = |r: &mut Replica<NullApp>, cp: StableCheckpoint| {
        r.handle(Input::Message {
            from: 1,
            msg: Message::SyncSnapshot {
                checkpoint: Arc::new(cp),
                switches: Vec::new(),
            },
        })
    };
    // Replica 1 claims a height; the fresh replica asks it; then its answer arrives.
    let offer = |r: &mut Replica<NullApp>, cp: StableCheckpoint| {
        let asked = r.handle(Input::Message {
            from: 1,
            msg: Message::Heartbeat {
                instance: bft::InstanceId(0),
                view: 0,
                last_decided: cp.seq,
            },
        });
        assert!(
            asked.iter().any(|o| matches!(
                o,
                Output::Send {
                    to: 1,
                    msg: Message::SyncRequest { .. }
                }
            )),
            "{asked:?}"
        );
        snapshot_from_1(r, cp)
    };
    // Unsolicited, even a valid one is not looked at.
    let out = snapshot_from_1(&mut fresh, StableCheckpoint::clone(&good));
    assert!(!out.iter().any(|o| matches!(o, Output::Installed { .. })));
    let tampered = {
        let mut t = StableCheckpoint::clone(&good);
        let mut bytes = t.snapshot.to_vec();
        bytes[8] ^= 1;
        t.snapshot = Arc::new(bytes);
        t
    };
    let too_few = {
        let mut t = StableCheckpoint::clone(&good);
        t.signatures.truncate(2);
        t
    };
    let repeated = {
        let mut t = StableCheckpoint::clone(&good);
        let first = t.signatures[0].clone();
        t.signatures = vec![first.clone(), first.clone(), first];
        t
    };
    let other_commit = {
        let mut t = StableCheckpoint::clone(&good);
        t.last_commit.seq += 1;
        t
    };
    for (what, forged) in [
        ("a changed snapshot", tampered),
        ("two signatures", too_few),
        ("one signer thrice", repeated),
        ("another decision's certificate", other_commit),
    ] {
        let out = offer(&mut fresh, forged);
        assert!(
            !out.iter().any(|o| matches!(o, Output::Installed { .. })),
            "{what} was installed"
        );
        assert_eq!(fresh.last_decided(), 0, "{what}");
    }
    let out = offer(&mut fresh, StableCheckpoint::clone(&good));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Installed { seq, .. } if *seq == good.seq))
    );
    assert_eq!(fresh.last_decided(), good.seq);
    assert_eq!(fresh.app().applied, good.seq);
}

#[test]
fn a_file_wal_drops_whole_segments_before_a_checkpoint_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal");
    let (wal, existing) = FileWal::open_sized(&path, 2048).unwrap();
    assert!(existing.is_empty());
    let mut c = Cluster::new();
    c.file = Some((1, wal, 0));
    c.submit(0..60);
    c.run(3_000);
    let (_, _, appended) = c.file.take().unwrap();
    let decided = c.replica(1).last_decided();
    assert!(decided >= 30);
    let (_, entries) = FileWal::open_sized(&path, 2048).unwrap();
    assert!(
        entries.len() * 2 < appended,
        "the file WAL kept {} of {appended} entries",
        entries.len()
    );
    assert!(entries.iter().any(|e| matches!(e, WalEntry::Checkpoint { .. })));
    let k = keys();
    let (r, _) =
        Replica::restore(config(1), app(), Box::new(k.signer(1)), Arc::new(k), &entries).expect("restore");
    assert_eq!(r.last_decided(), decided);
    assert_eq!(r.app().applied, decided);
}
