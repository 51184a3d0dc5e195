//! Throughput of the dependency graph: build + merge + release + complete of 500-tx
//! blocks at several conflict rates and read/write set sizes.
//!
//! Run: `cargo bench -p coordinator -- --warm-up-time 1 --measurement-time 3`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
// criterion_group!/criterion_main! generate undocumented items.
#![allow(missing_docs)]

use coordinator::{BlockTx, DependencyGraph, GraphConfig, LocalGraph, Released};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use types::{Height, Read, ReadWrite, Tx, TxNamespace};

const BLOCK_TXS: usize = 500;
const BLOCKS: usize = 20;

fn key(n: u64) -> Vec<u8> {
    format!("key-{n:028}").into_bytes()
}

/// `BLOCKS` blocks of `BLOCK_TXS` txs, each reading `reads` and writing `writes` keys of
/// one namespace. With probability `conflict` a tx reads a key written by one of the
/// previous `BLOCK_TXS` txs (same or previous block); every other key is fresh.
fn workload(conflict: f64, reads: usize, writes: usize) -> Vec<Vec<BlockTx>> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut next_key = 0u64;
    let mut written: VecDeque<u64> = VecDeque::new();
    let mut fresh = || {
        next_key += 1;
        next_key
    };
    (0..BLOCKS as u64)
        .map(|b| {
            (0..BLOCK_TXS as u32)
                .map(|i| {
                    let mut read_keys: Vec<u64> = (0..reads).map(|_| fresh()).collect();
                    if !written.is_empty() && rng.gen_bool(conflict) {
                        read_keys[0] = written[rng.gen_range(0..written.len())];
                    }
                    let write_keys: Vec<u64> = (0..writes).map(|_| fresh()).collect();
                    written.extend(&write_keys);
                    while written.len() > BLOCK_TXS * writes {
                        written.pop_front();
                    }
                    let ns = TxNamespace {
                        ns_id: "token".to_string(),
                        ns_version: 0,
                        reads_only: read_keys
                            .iter()
                            .map(|&k| Read {
                                key: key(k),
                                version: Some(0),
                            })
                            .collect(),
                        read_writes: write_keys
                            .iter()
                            .map(|&k| ReadWrite {
                                key: key(k),
                                version: None,
                                value: vec![1; 16],
                            })
                            .collect(),
                        blind_writes: Vec::new(),
                    };
                    let tx = Tx {
                        namespaces: vec![ns],
                        ..Tx::default()
                    };
                    BlockTx::new(format!("tx-{b}-{i}").into(), Height::new(b, i), Arc::new(tx))
                })
                .collect()
        })
        .collect()
}

/// Adds every block; after each block, completes the released txs of earlier blocks
/// (one block stays in flight, so dependencies cross blocks); drains at the end.
fn pipeline(blocks: Vec<Vec<BlockTx>>) -> u64 {
    let mut g = DependencyGraph::new(GraphConfig {
        max_pending: 1 << 20,
        ..GraphConfig::default()
    });
    let mut queue: VecDeque<Released> = VecDeque::new();
    let mut out = Vec::new();
    for (b, txs) in blocks.into_iter().enumerate() {
        let local = LocalGraph::build(g.key_hasher(), b as u64, txs).expect("valid block");
        g.merge_into(local, &mut out).expect("in order");
        queue.extend(out.drain(..));
        while queue.front().is_some_and(|r| r.height.block < b as u64) {
            let r = queue.pop_front().expect("non-empty");
            g.complete_into(r.height, types::Status::Committed, &mut out)
                .expect("released");
            queue.extend(out.drain(..));
        }
    }
    while let Some(r) = queue.pop_front() {
        g.complete_into(r.height, types::Status::Committed, &mut out)
            .expect("released");
        queue.extend(out.drain(..));
    }
    assert!(g.is_empty());
    g.stats().committed
}

fn throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("dag");
    group.throughput(Throughput::Elements((BLOCKS * BLOCK_TXS) as u64));
    for &(reads, writes) in &[(1, 1), (2, 2), (4, 4)] {
        for &conflict in &[0.0, 0.1, 0.3] {
            let blocks = workload(conflict, reads, writes);
            let id = BenchmarkId::from_parameter(format!("rw{reads}/{writes}_conflict{conflict}"));
            group.bench_with_input(id, &blocks, |bench, blocks| {
                bench.iter_batched(
                    || blocks.clone(),
                    |b| black_box(pipeline(b)),
                    BatchSize::LargeInput,
                )
            });
        }
    }
    group.finish();
}

/// The two phases separately, per 500-tx block (2/2 keys, conflict 0.1), to compare
/// with Fabric-X's per-block build and update times.
fn phases(c: &mut Criterion) {
    let blocks = workload(0.1, 2, 2);
    let mut group = c.benchmark_group("dag_phase");
    group.throughput(Throughput::Elements(BLOCK_TXS as u64));
    let hasher = DependencyGraph::new(GraphConfig::default()).key_hasher().clone();
    group.bench_function("build_block", |bench| {
        bench.iter_batched(
            || blocks[1].clone(),
            |txs| black_box(LocalGraph::build(&hasher, 1, txs).expect("valid")),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("merge_release_complete_block", |bench| {
        // One warm graph across iterations (as in a running coordinator); each iteration
        // merges the next block and completes it fully. Building is not timed.
        let mut g = DependencyGraph::new(GraphConfig::default());
        let mut queue: VecDeque<Released> = VecDeque::new();
        let mut out = Vec::new();
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let number = g.next_block();
                let txs = blocks[number as usize % BLOCKS]
                    .iter()
                    .map(|t| {
                        BlockTx::new(
                            t.id.clone(),
                            Height::new(number, t.height.index),
                            Arc::clone(&t.tx),
                        )
                    })
                    .collect();
                let local = LocalGraph::build(g.key_hasher(), number, txs).expect("valid");
                let start = Instant::now();
                g.merge_into(local, &mut out).expect("in order");
                queue.extend(out.drain(..));
                while let Some(r) = queue.pop_front() {
                    g.complete_into(r.height, types::Status::Committed, &mut out)
                        .expect("released");
                    queue.extend(out.drain(..));
                }
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, throughput, phases);
criterion_main!(benches);
