//! Property tests: on random high-conflict workloads with random completion orders and
//! aborts, the graph never has two conflicting txs in flight, releases every tx exactly
//! once and only after its earlier conflicting txs finished, and committing in release
//! order gives the same statuses and state as the serial vcservice oracle in block order.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

use common::{Key, State, commit, reads_of, writes_of};
use coordinator::{BlockTx, DependencyGraph, GraphConfig, LocalGraph, Released, build_parallel};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use types::{Height, META_NAMESPACE, Read, ReadWrite, Status, Tx, TxNamespace, Write};

/// Data namespaces of the workload (each has a policy row in `_meta`).
const NAMESPACES: [&str; 2] = ["a", "b"];

/// One generated tx and whether the sigverifier will reject it.
#[derive(Debug, Clone)]
struct GenTx {
    height: Height,
    tx: Arc<Tx>,
    bad_signature: bool,
    reads: BTreeSet<Key>,
    writes: BTreeSet<Key>,
}

impl GenTx {
    fn conflicts(&self, other: &GenTx) -> bool {
        !self.writes.is_disjoint(&other.reads)
            || !self.reads.is_disjoint(&other.writes)
            || !self.writes.is_disjoint(&other.writes)
    }
}

/// Generates txs the way endorsers would: against a view of the state (the serial
/// state so far), so most reads are current, with a share of stale or random versions
/// to provoke MVCC aborts.
struct Generator {
    rng: ChaCha8Rng,
    view: State,
    key_space: u32,
}

impl Generator {
    /// The version to expect for `key`: usually the one in the view.
    fn version(&mut self, key: &Key) -> Option<u64> {
        if self.rng.gen_bool(0.75) {
            return self.view.get(key).copied();
        }
        match self.rng.gen_range(0..3) {
            0 => None,
            v => Some(v - 1),
        }
    }

    fn data_namespace(&mut self, id: &str) -> TxNamespace {
        let meta = (META_NAMESPACE.to_string(), id.as_bytes().to_vec());
        let ns_version = self.version(&meta).unwrap_or(0);
        let mut ns = TxNamespace {
            ns_id: id.to_string(),
            ns_version,
            ..TxNamespace::default()
        };
        let mut keys: Vec<u32> = (0..self.key_space).collect();
        let count = self.rng.gen_range(1..=3.min(self.key_space as usize));
        for _ in 0..count {
            let key = keys
                .swap_remove(self.rng.gen_range(0..keys.len()))
                .to_string()
                .into_bytes();
            let version = self.version(&(id.to_string(), key.clone()));
            match self.rng.gen_range(0..3) {
                0 => ns.reads_only.push(Read { key, version }),
                1 => ns.read_writes.push(ReadWrite {
                    key,
                    version,
                    value: b"v".to_vec(),
                }),
                _ => ns.blind_writes.push(Write {
                    key,
                    value: b"v".to_vec(),
                }),
            }
        }
        ns
    }

    fn tx(&mut self) -> Tx {
        let mut namespaces = Vec::new();
        if self.rng.gen_bool(0.12) {
            // A policy update: bump (or create) the `_meta` row of a namespace.
            let target = NAMESPACES[self.rng.gen_range(0..NAMESPACES.len())];
            let version = self.version(&(META_NAMESPACE.to_string(), target.as_bytes().to_vec()));
            namespaces.push(TxNamespace {
                ns_id: META_NAMESPACE.to_string(),
                read_writes: vec![ReadWrite {
                    key: target.as_bytes().to_vec(),
                    version,
                    value: b"policy".to_vec(),
                }],
                ..TxNamespace::default()
            });
        }
        let first = self.rng.gen_range(0..NAMESPACES.len());
        let n_ns = if namespaces.is_empty() {
            self.rng.gen_range(1..=2)
        } else {
            self.rng.gen_range(0..=1)
        };
        for j in 0..n_ns {
            namespaces.push(self.data_namespace(NAMESPACES[(first + j) % NAMESPACES.len()]));
        }
        Tx {
            namespaces,
            ..Tx::default()
        }
    }
}

fn workload(seed: u64, blocks: usize, max_txs: usize, key_space: u32) -> Vec<Vec<GenTx>> {
    let mut generator = Generator {
        rng: ChaCha8Rng::seed_from_u64(seed),
        view: initial_state(),
        key_space,
    };
    (0..blocks as u64)
        .map(|b| {
            let n = generator.rng.gen_range(0..=max_txs);
            let mut index = 0u32;
            let mut txs = Vec::new();
            for _ in 0..n {
                index += generator.rng.gen_range(1..=2); // gaps: txs decided upstream
                let tx = generator.tx();
                let bad_signature = generator.rng.gen_bool(0.15);
                // The view lags: some txs are endorsed before earlier ones commit.
                if !bad_signature && generator.rng.gen_bool(0.7) {
                    commit(&mut generator.view, &tx);
                }
                let reads = reads_of(&tx).into_iter().map(|r| r.0).collect();
                let writes = writes_of(&tx);
                txs.push(GenTx {
                    height: Height::new(b, index),
                    tx: Arc::new(tx),
                    bad_signature,
                    reads,
                    writes,
                });
            }
            txs
        })
        .collect()
}

fn initial_state() -> State {
    NAMESPACES
        .iter()
        .map(|ns| ((META_NAMESPACE.to_string(), ns.as_bytes().to_vec()), 0))
        .collect()
}

/// What the test observes while driving the graph.
struct Run {
    all: BTreeMap<Height, GenTx>,
    added: Vec<Height>,
    in_flight: Vec<Height>,
    finished: BTreeSet<Height>,
    released: BTreeMap<Height, u32>,
    statuses: BTreeMap<Height, Status>,
    state: State,
}

impl Run {
    /// Checks the invariants for newly released txs and puts them in flight.
    fn on_released(&mut self, out: Vec<Released>) -> std::result::Result<(), TestCaseError> {
        for r in out {
            let t = &self.all[&r.height];
            prop_assert!(Arc::ptr_eq(&r.tx, &t.tx));
            let count = self.released.entry(r.height).or_insert(0);
            *count += 1;
            prop_assert_eq!(*count, 1, "{:?} released twice", r.height);
            for u in &self.in_flight {
                prop_assert!(
                    !self.all[u].conflicts(t),
                    "{:?} released while conflicting {:?} in flight",
                    r.height,
                    u
                );
            }
            for u in self.added.iter().filter(|u| **u < r.height) {
                if self.all[u].conflicts(t) {
                    prop_assert!(
                        self.finished.contains(u),
                        "{:?} released before earlier {:?}",
                        r.height,
                        u
                    );
                }
            }
            self.in_flight.push(r.height);
        }
        Ok(())
    }

    /// (d) Maximal concurrency: a tx still waits only while some earlier unfinished tx
    /// conflicts with it (the transitive reduction must not over-serialize).
    fn check_no_needless_wait(&self) -> std::result::Result<(), TestCaseError> {
        let unfinished: Vec<&GenTx> = self
            .added
            .iter()
            .filter(|h| !self.finished.contains(h))
            .map(|h| &self.all[h])
            .collect();
        for t in unfinished
            .iter()
            .filter(|t| !self.released.contains_key(&t.height))
        {
            let blocked = unfinished.iter().any(|u| u.height < t.height && u.conflicts(t));
            prop_assert!(
                blocked,
                "{:?} waits although no earlier unfinished tx conflicts",
                t.height
            );
        }
        Ok(())
    }

    /// The vcservice's turn for a released tx: status from the sigverifier flag, else
    /// MVCC validation against the committed state.
    fn finish(&mut self, h: Height) -> Status {
        let t = &self.all[&h];
        let status = if t.bad_signature {
            Status::AbortedSignatureInvalid
        } else {
            commit(&mut self.state, &t.tx)
        };
        self.finished.insert(h);
        self.statuses.insert(h, status);
        status
    }
}

/// Drives the graph through `blocks` with a seeded random interleaving of block
/// arrivals and completions. With `prebuilt`, every block's local graph is built up
/// front on the rayon pool and merged when its turn comes.
fn drive(
    blocks: &[Vec<GenTx>],
    max_pending: usize,
    seed: u64,
    prebuilt: bool,
) -> std::result::Result<Run, TestCaseError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let max_window = rng.gen_range(1..80);
    let mut g = DependencyGraph::new(GraphConfig {
        max_pending,
        max_window,
        first_block: 0,
        hash_seed: seed,
    });
    let input = |b: usize| -> Vec<BlockTx> {
        blocks[b]
            .iter()
            .map(|t| BlockTx::new(format!("{:?}", t.height).into(), t.height, t.tx.clone()))
            .collect()
    };
    let mut locals: VecDeque<LocalGraph> = if prebuilt {
        let all = (0..blocks.len()).map(|b| (b as u64, input(b))).collect();
        build_parallel(g.key_hasher(), all)
            .into_iter()
            .map(|l| l.expect("valid block"))
            .collect()
    } else {
        VecDeque::new()
    };
    let all = blocks.iter().flatten().map(|t| (t.height, t.clone())).collect();
    let mut run = Run {
        all,
        added: Vec::new(),
        in_flight: Vec::new(),
        finished: BTreeSet::new(),
        released: BTreeMap::new(),
        statuses: BTreeMap::new(),
        state: initial_state(),
    };
    let mut next = 0usize;
    loop {
        let can_add = next < blocks.len() && g.has_capacity();
        if !can_add && run.in_flight.is_empty() {
            break;
        }
        if can_add && (run.in_flight.is_empty() || rng.gen_bool(0.35)) {
            let out = match locals.pop_front() {
                Some(local) => g.merge(local),
                None => g.add_block(next as u64, input(next)),
            }
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
            run.added.extend(blocks[next].iter().map(|t| t.height));
            next += 1;
            run.on_released(out)?;
        } else {
            let h = run.in_flight.swap_remove(rng.gen_range(0..run.in_flight.len()));
            let status = run.finish(h);
            let out = g
                .complete(h, status)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            run.on_released(out)?;
        }
        prop_assert_eq!(g.in_flight(), run.in_flight.len());
        run.check_no_needless_wait()?;
    }
    prop_assert_eq!(next, blocks.len(), "stalled with {} pending", g.pending());
    prop_assert!(g.is_empty());
    prop_assert_eq!(g.indexed_keys(), 0);
    prop_assert_eq!(run.released.len(), run.all.len());
    Ok(run)
}

/// The serial oracle: every tx in block order against one state.
fn serial(blocks: &[Vec<GenTx>]) -> (BTreeMap<Height, Status>, State) {
    let mut state = initial_state();
    let mut statuses = BTreeMap::new();
    for t in blocks.iter().flatten() {
        let s = if t.bad_signature {
            Status::AbortedSignatureInvalid
        } else {
            commit(&mut state, &t.tx)
        };
        statuses.insert(t.height, s);
    }
    (statuses, state)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn graph_matches_serial_oracle(
        seed in any::<u64>(),
        blocks in 1usize..8,
        max_txs in 0usize..24,
        key_space in 1u32..6,
        max_pending in 1usize..40,
        prebuilt in any::<bool>(),
    ) {
        let w = workload(seed, blocks, max_txs, key_space);
        let run = drive(&w, max_pending, seed, prebuilt)?;
        let (statuses, state) = serial(&w);
        prop_assert_eq!(run.statuses, statuses);
        prop_assert_eq!(run.state, state);
    }
}

/// The workloads are not trivial: a fixed sample commits and aborts for both reasons.
#[test]
fn workloads_exercise_commits_and_aborts() {
    let w = workload(42, 6, 13, 3);
    let (statuses, _) = serial(&w);
    let count = |s: Status| statuses.values().filter(|v| **v == s).count();
    assert!(count(Status::Committed) > 0);
    assert!(count(Status::AbortedMvccConflict) > 0);
    assert!(count(Status::AbortedSignatureInvalid) > 0);
    let run = drive(&w, 10, 42, false).unwrap();
    assert_eq!(run.statuses, statuses);
}
