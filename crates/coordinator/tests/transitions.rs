//! Table tests of the dependency graph's transitions.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

use common::{blind, block, ns, rw, tx};
use coordinator::{DependencyGraph, Error, GraphConfig, Input, LocalGraph, build_parallel};
use std::sync::Arc;
use types::{Height, META_NAMESPACE, Status, Tx};

/// One step of a table test and the heights it must release (in any order).
enum Step {
    Add(u64, Vec<Arc<Tx>>),
    Done(u64, u32),
    Abort(u64, u32),
}

fn h(b: u64, i: u32) -> Height {
    Height::new(b, i)
}

/// Runs `steps`, checking each step's released set against `expect`.
fn run(name: &str, steps: Vec<(Step, Vec<(u64, u32)>)>) -> DependencyGraph {
    let mut g = DependencyGraph::new(GraphConfig::default());
    for (n, (step, expect)) in steps.into_iter().enumerate() {
        let got = match step {
            Step::Add(b, txs) => g.add_block(b, block(b, txs)),
            Step::Done(b, i) => g.complete(h(b, i), Status::Committed),
            Step::Abort(b, i) => g.complete(h(b, i), Status::AbortedMvccConflict),
        }
        .unwrap_or_else(|e| panic!("{name}: step {n} failed: {e}"));
        let mut got: Vec<Height> = got.into_iter().map(|r| r.height).collect();
        got.sort();
        let want: Vec<Height> = expect.into_iter().map(|(b, i)| h(b, i)).collect();
        assert_eq!(got, want, "{name}: step {n}");
    }
    g
}

#[test]
fn write_read() {
    run(
        "wr",
        vec![
            (
                Step::Add(0, vec![rw(&[], &["a"]), rw(&["a"], &["z"])]),
                vec![(0, 0)],
            ),
            (Step::Done(0, 0), vec![(0, 1)]),
        ],
    );
}

#[test]
fn read_write() {
    run(
        "rw",
        vec![
            (
                Step::Add(0, vec![rw(&["a"], &["x"]), blind(&["a"])]),
                vec![(0, 0)],
            ),
            (Step::Done(0, 0), vec![(0, 1)]),
        ],
    );
}

#[test]
fn write_write() {
    run(
        "ww",
        vec![
            (Step::Add(0, vec![blind(&["a"]), blind(&["a"])]), vec![(0, 0)]),
            (Step::Done(0, 0), vec![(0, 1)]),
        ],
    );
}

#[test]
fn shared_reads_and_disjoint_keys_do_not_conflict() {
    let g = run(
        "none",
        vec![(
            Step::Add(0, vec![rw(&["a"], &["x"]), rw(&["a"], &["y"]), blind(&["z"])]),
            vec![(0, 0), (0, 1), (0, 2)],
        )],
    );
    assert_eq!(g.in_flight(), 3);
    assert_eq!(g.waiting(), 0);
}

#[test]
fn across_blocks() {
    run(
        "across",
        vec![
            (Step::Add(0, vec![rw(&[], &["a"])]), vec![(0, 0)]),
            (
                Step::Add(1, vec![rw(&["a"], &["b"]), rw(&["c"], &["d"])]),
                vec![(1, 1)],
            ),
            (Step::Add(2, vec![rw(&["b"], &["e"])]), vec![]),
            (Step::Done(0, 0), vec![(1, 0)]),
            (Step::Done(1, 0), vec![(2, 0)]),
        ],
    );
}

#[test]
fn earlier_block_readers_hold_back_a_writer() {
    run(
        "readers-then-writer",
        vec![
            (
                Step::Add(0, vec![rw(&["a"], &["x"]), rw(&["a"], &["y"])]),
                vec![(0, 0), (0, 1)],
            ),
            (Step::Add(1, vec![blind(&["a"])]), vec![]),
            (Step::Done(0, 1), vec![]),
            (Step::Done(0, 0), vec![(1, 0)]),
        ],
    );
}

#[test]
fn finished_predecessor_does_not_block() {
    run(
        "finished",
        vec![
            (Step::Add(0, vec![rw(&[], &["a"])]), vec![(0, 0)]),
            (Step::Done(0, 0), vec![]),
            (Step::Add(1, vec![rw(&["a"], &["a"])]), vec![(1, 0)]),
        ],
    );
}

#[test]
fn chain_releases_one_at_a_time() {
    let g = run(
        "chain",
        vec![
            (
                Step::Add(0, vec![rw(&[], &["a"]), rw(&[], &["a"]), rw(&[], &["a"])]),
                vec![(0, 0)],
            ),
            (Step::Add(1, vec![rw(&[], &["a"])]), vec![]),
            (Step::Done(0, 0), vec![(0, 1)]),
            (Step::Done(0, 1), vec![(0, 2)]),
            (Step::Done(0, 2), vec![(1, 0)]),
            (Step::Done(1, 0), vec![]),
        ],
    );
    assert!(g.is_empty());
    assert_eq!(g.indexed_keys(), 0);
    // A chain needs only n - 1 edges: no edge to txs already covered transitively.
    assert_eq!(g.stats().edges, 3);
}

#[test]
fn readers_writer_readers() {
    run(
        "rwr",
        vec![
            (
                Step::Add(
                    0,
                    vec![
                        rw(&["a"], &["x"]),
                        rw(&["a"], &["y"]),
                        blind(&["a"]),
                        rw(&["a"], &["w"]),
                    ],
                ),
                vec![(0, 0), (0, 1)],
            ),
            (Step::Done(0, 0), vec![]),
            (Step::Done(0, 1), vec![(0, 2)]),
            (Step::Done(0, 2), vec![(0, 3)]),
        ],
    );
}

#[test]
fn diamond_waits_for_both() {
    run(
        "diamond",
        vec![
            (
                Step::Add(0, vec![rw(&[], &["a"]), rw(&[], &["b"]), rw(&["a", "b"], &["c"])]),
                vec![(0, 0), (0, 1)],
            ),
            (Step::Done(0, 1), vec![]),
            (Step::Done(0, 0), vec![(0, 2)]),
        ],
    );
}

#[test]
fn aborted_predecessor_releases_like_committed() {
    let g = run(
        "aborted",
        vec![
            (
                Step::Add(0, vec![rw(&[], &["a"]), rw(&["a"], &["b"])]),
                vec![(0, 0)],
            ),
            (Step::Abort(0, 0), vec![(0, 1)]),
            (Step::Done(0, 1), vec![]),
        ],
    );
    assert_eq!(g.stats().aborted, 1);
    assert_eq!(g.stats().committed, 1);
}

#[test]
fn meta_update_serializes_with_users_of_the_namespace() {
    let policy_update = tx(vec![ns(META_NAMESPACE, &[], &["ns1"], &[])]);
    let other_ns = tx(vec![ns("ns2", &[], &["x"], &[])]);
    run(
        "meta",
        vec![
            (
                Step::Add(0, vec![rw(&[], &["x"]), policy_update, rw(&[], &["y"]), other_ns]),
                vec![(0, 0), (0, 3)],
            ),
            // The update waits for the earlier user of ns1 (it read (_meta, ns1)) ...
            (Step::Done(0, 3), vec![]),
            (Step::Done(0, 0), vec![(0, 1)]),
            // ... and the later user of ns1 waits for the update.
            (Step::Done(0, 1), vec![(0, 2)]),
        ],
    );
}

#[test]
fn multi_namespace_tx_conflicts_on_any_namespace() {
    let both = tx(vec![ns("ns1", &["a"], &[], &[]), ns("ns2", &[], &["b"], &[])]);
    run(
        "multi-ns",
        vec![
            (
                Step::Add(
                    0,
                    vec![blind(&["a"]), both, tx(vec![ns("ns2", &["b"], &["c"], &[])])],
                ),
                vec![(0, 0)],
            ),
            (Step::Done(0, 0), vec![(0, 1)]),
            (Step::Done(0, 1), vec![(0, 2)]),
        ],
    );
}

#[test]
fn out_of_order_blocks_are_rejected() {
    let mut g = DependencyGraph::new(GraphConfig {
        first_block: 5,
        ..GraphConfig::default()
    });
    assert_eq!(
        g.add_block(6, block(6, vec![])),
        Err(Error::OutOfOrderBlock { expected: 5, got: 6 })
    );
    assert_eq!(
        g.add_block(5, block(5, vec![blind(&["a"])])).map(|r| r.len()),
        Ok(1)
    );
    assert_eq!(
        g.add_block(5, block(5, vec![])),
        Err(Error::OutOfOrderBlock { expected: 6, got: 5 })
    );
    assert_eq!(g.next_block(), 6);
    assert_eq!(g.pending(), 1);
}

#[test]
fn capacity_applies_back_pressure() {
    let mut g = DependencyGraph::new(GraphConfig {
        max_pending: 2,
        ..GraphConfig::default()
    });
    assert!(g.has_capacity());
    // A block is accepted whole even if it overshoots the limit.
    let released = g
        .add_block(0, block(0, vec![blind(&["a"]), blind(&["a"]), blind(&["b"])]))
        .unwrap();
    assert_eq!(released.len(), 2);
    assert!(!g.has_capacity());
    assert_eq!(
        g.add_block(1, block(1, vec![])),
        Err(Error::GraphFull { pending: 3, limit: 2 })
    );
    assert_eq!(g.complete(h(0, 0), Status::Committed).unwrap().len(), 1);
    assert!(!g.has_capacity());
    g.complete(h(0, 2), Status::Committed).unwrap();
    assert!(g.has_capacity());
    assert_eq!(g.add_block(1, block(1, vec![])), Ok(vec![]));
}

#[test]
fn bad_heights_are_rejected() {
    let mut g = DependencyGraph::new(GraphConfig::default());
    let mut txs = block(1, vec![blind(&["a"])]);
    assert_eq!(
        g.add_block(0, txs.clone()),
        Err(Error::HeightOutsideBlock {
            block_number: 0,
            height: h(1, 0)
        })
    );
    txs = block(0, vec![blind(&["a"]), blind(&["b"])]);
    txs.swap(0, 1);
    assert_eq!(
        g.add_block(0, txs),
        Err(Error::HeightNotIncreasing {
            block_number: 0,
            previous: h(0, 1),
            got: h(0, 0)
        })
    );
    assert!(g.is_empty());
    assert_eq!(g.next_block(), 0);
}

#[test]
fn sparse_heights_and_completion_errors() {
    let mut g = DependencyGraph::new(GraphConfig::default());
    // Indices 1 and 3 were decided upstream (malformed, duplicate) and left out.
    let mut txs = block(
        0,
        vec![blind(&["a"]), blind(&["x"]), blind(&["a"]), blind(&["y"])],
    );
    txs.remove(3);
    txs.remove(1);
    let released = g.add_block(0, txs).unwrap();
    assert_eq!(
        released.iter().map(|r| r.height).collect::<Vec<_>>(),
        vec![h(0, 0)]
    );
    assert_eq!(released[0].id.as_str(), "b0t0");
    assert_eq!(
        g.complete(h(0, 1), Status::Committed),
        Err(Error::UnknownTx { height: h(0, 1) })
    );
    assert_eq!(
        g.complete(h(1, 0), Status::Committed),
        Err(Error::UnknownTx { height: h(1, 0) })
    );
    assert_eq!(
        g.complete(h(0, 2), Status::Committed),
        Err(Error::NotReleased { height: h(0, 2) })
    );
    assert_eq!(g.complete(h(0, 0), Status::Committed).unwrap().len(), 1);
    assert_eq!(
        g.complete(h(0, 0), Status::Committed),
        Err(Error::AlreadyFinished { height: h(0, 0) })
    );
    g.complete(h(0, 2), Status::Committed).unwrap();
    assert!(g.is_empty());
    assert_eq!(
        g.complete(h(0, 2), Status::Committed),
        Err(Error::UnknownTx { height: h(0, 2) })
    );
}

#[test]
fn foreign_hasher_is_rejected() {
    let mut g = DependencyGraph::new(GraphConfig {
        hash_seed: 1,
        ..GraphConfig::default()
    });
    let local = LocalGraph::build(&coordinator::KeyHasher::new(2), 0, block(0, vec![])).unwrap();
    assert_eq!(
        g.merge(local).map(|r| r.len()),
        Err(Error::HasherMismatch { expected: 1, got: 2 })
    );
}

#[test]
fn local_graph_edges_are_transitively_reduced() {
    let g = DependencyGraph::new(GraphConfig::default());
    let txs = vec![
        rw(&["a"], &["x"]),
        rw(&["a"], &["y"]),
        blind(&["a"]),
        rw(&["a"], &["a"]),
        blind(&["a"]),
    ];
    let local = LocalGraph::build(g.key_hasher(), 0, block(0, txs)).unwrap();
    assert_eq!(local.local_deps(0), &[] as &[u32]);
    let mut readers = local.local_deps(2).to_vec();
    readers.sort();
    assert_eq!(readers, vec![0, 1]);
    assert_eq!(local.local_deps(3), &[2]);
    assert_eq!(local.local_deps(4), &[3]);
    assert_eq!(local.edge_count(), 4);
}

#[test]
fn parallel_build_merges_like_sequential_build() {
    let blocks: Vec<Vec<Arc<Tx>>> = (0..6)
        .map(|b| {
            (0..20)
                .map(|i| rw(&[&format!("k{}", (i + b) % 7)], &[&format!("k{}", (i * 3) % 5)]))
                .collect()
        })
        .collect();
    let mut seq_graph = DependencyGraph::new(GraphConfig::default());
    let mut par_graph = DependencyGraph::new(GraphConfig::default());
    let mut seq_out = Vec::new();
    for (b, txs) in blocks.iter().enumerate() {
        seq_out.extend(
            seq_graph
                .add_block(b as u64, block(b as u64, txs.clone()))
                .unwrap(),
        );
    }
    let input = blocks
        .iter()
        .enumerate()
        .map(|(b, t)| (b as u64, block(b as u64, t.clone())))
        .collect();
    let mut par_out = Vec::new();
    for local in build_parallel(&par_graph.key_hasher().clone(), input) {
        par_out.extend(par_graph.merge(local.unwrap()).unwrap());
    }
    assert_eq!(seq_out, par_out);
    assert_eq!(seq_graph.stats(), par_graph.stats());
}

#[test]
fn hot_meta_key_readers_are_counted_across_compaction() {
    // Every tx on ns1 reads (_meta, ns1): its readers list grows with the traffic and
    // is compacted lazily. A policy update must still wait for exactly the live readers.
    let mut g = DependencyGraph::new(GraphConfig::default());
    let users = |b: u64| {
        (0..100)
            .map(|i| rw(&[], &[&format!("k{b}-{i}")]))
            .collect::<Vec<_>>()
    };
    assert_eq!(g.add_block(0, block(0, users(0))).unwrap().len(), 100);
    for i in 0..90 {
        assert_eq!(g.complete(h(0, i), Status::Committed), Ok(vec![]));
    }
    assert_eq!(g.add_block(1, block(1, users(1))).unwrap().len(), 100);
    let update = tx(vec![ns(META_NAMESPACE, &[], &["ns1"], &[])]);
    assert_eq!(
        g.add_block(2, block(2, vec![update, rw(&[], &["after"])])),
        Ok(vec![])
    );
    for i in 90..100 {
        assert_eq!(g.complete(h(0, i), Status::Committed), Ok(vec![]));
    }
    for i in (0..100).rev() {
        let released = g.complete(h(1, i), Status::Committed).unwrap();
        let want = if i == 0 { vec![h(2, 0)] } else { vec![] };
        assert_eq!(
            released.iter().map(|r| r.height).collect::<Vec<_>>(),
            want,
            "after (1, {i})"
        );
    }
    assert_eq!(g.complete(h(2, 0), Status::Committed).unwrap()[0].height, h(2, 1));
    g.complete(h(2, 1), Status::Committed).unwrap();
    assert!(g.is_empty());
    assert_eq!(g.indexed_keys(), 0);
}

#[test]
fn window_bounds_finished_txs_behind_a_slow_one() {
    let mut g = DependencyGraph::new(GraphConfig {
        max_window: 3,
        ..GraphConfig::default()
    });
    assert_eq!(
        g.add_block(0, block(0, vec![blind(&["a"]), blind(&["b"]), blind(&["c"])]))
            .unwrap()
            .len(),
        3
    );
    g.complete(h(0, 2), Status::Committed).unwrap();
    g.complete(h(0, 1), Status::Committed).unwrap();
    assert_eq!((g.pending(), g.window()), (1, 3));
    assert!(!g.has_capacity());
    assert_eq!(
        g.add_block(1, block(1, vec![])),
        Err(Error::WindowFull { window: 3, limit: 3 })
    );
    g.complete(h(0, 0), Status::Committed).unwrap();
    assert_eq!(g.window(), 0);
    assert_eq!(g.add_block(1, block(1, vec![])), Ok(vec![]));
}

#[test]
fn handle_is_merge_and_complete() {
    let mut g = DependencyGraph::new(GraphConfig::default());
    let local = LocalGraph::build(g.key_hasher(), 0, block(0, vec![blind(&["a"]), blind(&["a"])])).unwrap();
    let released = g.handle(Input::Block(local)).unwrap();
    assert_eq!(
        released.iter().map(|r| r.height).collect::<Vec<_>>(),
        vec![h(0, 0)]
    );
    let released = g.handle(Input::Completed {
        height: h(0, 0),
        status: Status::AbortedSignatureInvalid,
    });
    assert_eq!(
        released.unwrap().iter().map(|r| r.height).collect::<Vec<_>>(),
        vec![h(0, 1)]
    );
    assert_eq!(
        g.handle(Input::Completed {
            height: h(0, 0),
            status: Status::Committed
        }),
        Err(Error::AlreadyFinished { height: h(0, 0) })
    );
}
