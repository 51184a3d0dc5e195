//! The consenters' ordering of BAFs in one process: n BFT replicas running the Arma
//! application on one thread, real Ed25519 signatures for the engine's votes and for
//! every BAF (the signer's and the primary's), in-memory messages, no WAL I/O.
//!
//! One iteration = one decision carrying the BAFs of `m` new batches (all n batchers of
//! each batch attest it; f+1 order it), spread over 4 shards, delivered and applied by
//! every replica. Signing the BAFs is not measured.
//!
//! `cargo bench -p ordersim --bench consenter`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arma::{Baf, SignedBatch, encode_baf};
use bft::crypto::ed25519_keys;
use bft::{Config, Input, Message, Output, Replica, ReplicaId};
use consenter::application::{ArmaApp, ArmaConfig, ArmaState};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use crypto::{Scheme, SigningKey, derive_signing_key};
use types::BatchId;

const SHARDS: u32 = 4;

fn batcher_key(p: u32, s: u32) -> SigningKey {
    derive_signing_key(Scheme::Ed25519, &format!("fabrx-consenter-bench/{p}/{s}"))
}

struct Cluster {
    n: u32,
    replicas: Vec<Replica<ArmaApp>>,
    queue: VecDeque<(ReplicaId, ReplicaId, Message)>,
    next_seq: Vec<u64>,
    keys: BTreeMap<(u32, u32), SigningKey>,
}

impl Cluster {
    fn new(n: u32, max_batch: usize) -> Cluster {
        let keys: BTreeMap<(u32, u32), SigningKey> = (1..=n)
            .flat_map(|p| (0..SHARDS).map(move |s| ((p, s), batcher_key(p, s))))
            .collect();
        let public = keys.iter().map(|(k, v)| (*k, v.public_key())).collect();
        let cfg = ArmaConfig::new(arma::Parties::contiguous(n), SHARDS, 1 << 20, public).unwrap();
        let (signers, verifier) = ed25519_keys(7, n);
        let verifier: Arc<dyn bft::Verifier> = Arc::new(verifier);
        let replicas = signers
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let mut c = Config::new(i as ReplicaId, n);
                c.max_batch_count = max_batch;
                c.max_batch_bytes = 64 << 20;
                let app = ArmaApp::new(cfg.clone(), ArmaState::genesis(SHARDS));
                Replica::new(c, app, Box::new(s), verifier.clone())
            })
            .collect();
        Cluster {
            n,
            replicas,
            queue: VecDeque::new(),
            next_seq: vec![0; SHARDS as usize],
            keys,
        }
    }

    /// The BAFs of `m` new batches, from every party.
    fn bafs(&mut self, m: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for i in 0..m {
            let shard = (i as u32) % SHARDS;
            let seq = &mut self.next_seq[shard as usize];
            *seq += 1;
            let primary = arma::primary_of(shard, 0, &arma::Parties::contiguous(self.n));
            let request: arma::Request = Arc::from(format!("{shard}/{seq}").into_bytes().into_boxed_slice());
            let batch = SignedBatch::sign(
                BatchId::new(shard, primary, *seq),
                0,
                vec![request],
                &self.keys[&(primary, shard)],
            );
            for p in 1..=self.n {
                out.push(encode_baf(&Baf::sign(&batch, p, &self.keys[&(p, shard)])));
            }
        }
        out
    }

    fn route(&mut self, from: ReplicaId, outputs: Vec<Output>) -> usize {
        let mut delivered = 0;
        for o in outputs {
            match o {
                Output::Send { to, msg } => self.queue.push_back((from, to, msg)),
                Output::Broadcast(msg) => {
                    for to in 0..self.n {
                        if to != from {
                            self.queue.push_back((from, to, msg.clone()));
                        }
                    }
                }
                Output::Deliver(_) => delivered += 1,
                _ => {}
            }
        }
        delivered
    }

    /// Decides one proposal holding `bafs`; returns the time spent.
    fn decide(&mut self, bafs: Vec<Vec<u8>>) -> Duration {
        let t = Instant::now();
        let mut delivered = 0;
        for r in bafs {
            let out = self.replicas[0].handle(Input::Request(r));
            delivered += self.route(0, out);
        }
        let mut now = 0;
        while delivered < self.n as usize {
            while let Some((from, to, msg)) = self.queue.pop_front() {
                let out = self.replicas[to as usize].handle(Input::Message { from, msg });
                delivered += self.route(to, out);
            }
            if delivered < self.n as usize {
                now += 10;
                let out = self.replicas[0].handle(Input::Tick(now));
                delivered += self.route(0, out);
            }
        }
        for r in &mut self.replicas {
            r.app_mut().take_applied();
        }
        t.elapsed()
    }
}

fn bench_consenter(c: &mut Criterion) {
    let mut group = c.benchmark_group("consenter");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for n in [4u32, 7] {
        for m in [1usize, 10, 100] {
            let bafs_per = m * n as usize;
            let mut cluster = Cluster::new(n, bafs_per);
            group.throughput(Throughput::Elements(bafs_per as u64));
            group.bench_function(BenchmarkId::new(format!("n{n}"), format!("batches{m}")), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            let bafs = cluster.bafs(m);
                            cluster.decide(bafs)
                        })
                        .sum()
                })
            });
            let headers = cluster.replicas[1].app().state().next_block;
            assert!(headers > 0, "batches were ordered");
        }
    }
    group.finish();
}

criterion_group!(benches, bench_consenter);
criterion_main!(benches);
