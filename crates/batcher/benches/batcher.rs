//! The batcher core on one core, 300-byte requests, one shard, four parties.
//!
//! * `primary/<B>`: admit `B` requests, cut them into one batch (signing its header),
//!   `Persisted` (signing the BAF), f+1 acks, then `Ordered` — requests/s and batches/s
//!   of the primary's deciding logic.
//! * `secondary/<B>`: admit the `B` requests, accept the primary's batch of them
//!   (`verify_batch`: the primary's signature, the digest, every request's size, shard and
//!   uniqueness), `Persisted` (signing the BAF and the ack), then `Ordered`.
//!
//! Persistence, networking and the consenters are not included (the shell's costs).
//! `cargo bench -p batcher`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use batcher::{Baf, Batcher, Config, Input, Output, Request, SignedBatch, TermInfo};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use crypto::{Scheme, SigningKey, derive_signing_key};
use types::BatchId;

const N: u32 = 4;
const REQUEST_BYTES: usize = 300;

fn key(p: u32) -> SigningKey {
    derive_signing_key(Scheme::Ed25519, &format!("fabrx-batcher-bench-{p}"))
}

fn config(party: u32, batch: u32) -> Config {
    Config {
        party,
        shard: 0,
        parties: arma::Parties::contiguous(N),
        shards: 1,
        keys: (1..=N)
            .map(|p| (p, key(p).public_key()))
            .collect::<BTreeMap<_, _>>(),
        max_request_bytes: NonZeroUsize::new(1 << 20).unwrap(),
        max_batch_requests: NonZeroU32::new(batch).unwrap(),
        max_batch_bytes: NonZeroU64::new(64 << 20).unwrap(),
        batch_timeout_ms: 1_000_000,
        window: NonZeroU32::new(8).unwrap(),
        max_unordered_batches: NonZeroU32::new(8).unwrap(),
        mempool_max_requests: NonZeroUsize::new(1 << 20).unwrap(),
        mempool_max_bytes: NonZeroU64::new(1 << 32).unwrap(),
        ordered_memory: NonZeroUsize::new(1 << 16).unwrap(),
        forward_timeout_ms: 1_000_000,
        complain_timeout_ms: 2_000_000,
    }
}

fn start() -> TermInfo {
    TermInfo {
        term: 0,
        last_ordered_seq: 0,
    }
}

/// `count` distinct requests starting at `from`.
fn requests(from: u64, count: u64) -> Vec<Request> {
    (from..from + count)
        .map(|i| {
            let mut r = vec![0u8; REQUEST_BYTES];
            r[..8].copy_from_slice(&i.to_le_bytes());
            Arc::from(r.into_boxed_slice())
        })
        .collect()
}

/// One round as primary; returns the time spent in the core.
fn primary_round(b: &mut Batcher, reqs: Vec<Request>, acks: &[(u32, SigningKey)]) -> Duration {
    let t = Instant::now();
    let mut out = Vec::new();
    for r in &reqs {
        out.extend(b.handle(Input::Request(Arc::clone(r))));
    }
    out.extend(b.handle(Input::Tick(0)));
    let Some(batch) = out.into_iter().find_map(|o| match o {
        Output::Persist(batch) => Some(batch),
        _ => None,
    }) else {
        panic!("no batch cut")
    };
    b.handle(Input::Persisted {
        id: batch.id(),
        digest: batch.header.digest,
    });
    let elapsed = t.elapsed();
    // The secondaries' acks are signed outside the measurement.
    let signed: Vec<Baf> = acks.iter().map(|(p, k)| Baf::sign(&batch, *p, k)).collect();
    let t = Instant::now();
    for baf in signed {
        b.handle(Input::Baf(baf));
    }
    b.handle(Input::Ordered {
        id: batch.id(),
        requests: batch.requests.clone(),
    });
    elapsed + t.elapsed()
}

/// One round as secondary for batch `seq`; the primary's signing is not measured.
fn secondary_round(b: &mut Batcher, seq: u64, reqs: Vec<Request>, primary: &SigningKey) -> Duration {
    let batch = SignedBatch::sign(BatchId::new(0, 1, seq), 0, reqs.clone(), primary);
    let t = Instant::now();
    for r in reqs {
        b.handle(Input::Request(r));
    }
    b.handle(Input::Batch {
        from: 1,
        batch: batch.clone(),
    });
    let out = b.handle(Input::Persisted {
        id: batch.id(),
        digest: batch.header.digest,
    });
    assert!(out.iter().any(|o| matches!(o, Output::SendBaf(_))));
    b.handle(Input::Ordered {
        id: batch.id(),
        requests: batch.requests,
    });
    t.elapsed()
}

fn bench_batcher(c: &mut Criterion) {
    let mut group = c.benchmark_group("batcher");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for size in [100u32, 1000] {
        group.throughput(Throughput::Elements(u64::from(size)));
        let mut primary = Batcher::new(config(1, size), key(1), start()).unwrap();
        let acks = vec![(2, key(2))];
        let mut next = 0u64;
        group.bench_function(BenchmarkId::new("primary", size), |bench| {
            bench.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        next += u64::from(size);
                        primary_round(&mut primary, requests(next, u64::from(size)), &acks)
                    })
                    .sum()
            })
        });
        let mut secondary = Batcher::new(config(2, size), key(2), start()).unwrap();
        let primary_key = key(1);
        let mut seq = 0u64;
        group.bench_function(BenchmarkId::new("secondary", size), |bench| {
            bench.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        seq += 1;
                        next += u64::from(size);
                        secondary_round(&mut secondary, seq, requests(next, u64::from(size)), &primary_key)
                    })
                    .sum()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_batcher);
criterion_main!(benches);
