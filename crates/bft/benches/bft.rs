//! Throughput of the engine in one process with real Ed25519 signatures:
//! n replicas, in-memory message passing, no WAL I/O (persist outputs are dropped),
//! ~200-byte requests, batch sizes 1 / 100 / 1000. One iteration = one decision
//! delivered by every replica. Also: verifying one decision certificate.
//!
//! `cargo bench -p bft`

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bft::crypto::ed25519_keys;
use bft::{Config, Decision, Input, Message, NullApp, Output, Replica, ReplicaId, verify_decision};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const REQUEST_BYTES: usize = 200;

struct Cluster {
    replicas: Vec<Replica<NullApp>>,
    queue: VecDeque<(ReplicaId, ReplicaId, Message)>,
    counter: u64,
    last: Option<Arc<Decision>>,
}

impl Cluster {
    fn new(n: u32, batch: usize) -> Cluster {
        let (signers, verifier) = ed25519_keys(1, n);
        let verifier: Arc<dyn bft::Verifier> = Arc::new(verifier);
        let replicas = signers
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let mut cfg = Config::new(i as ReplicaId, n);
                cfg.max_batch_count = batch;
                Replica::new(cfg, NullApp::default(), Box::new(s), verifier.clone())
            })
            .collect();
        Cluster {
            replicas,
            queue: VecDeque::new(),
            counter: 0,
            last: None,
        }
    }

    fn route(&mut self, from: ReplicaId, outputs: Vec<Output>) -> usize {
        let mut delivered = 0;
        for o in outputs {
            match o {
                Output::Send { to, msg } => self.queue.push_back((from, to, msg)),
                Output::Broadcast(msg) => {
                    for to in 0..self.replicas.len() as ReplicaId {
                        if to != from {
                            self.queue.push_back((from, to, msg.clone()));
                        }
                    }
                }
                Output::Deliver(d) => {
                    delivered += 1;
                    self.last = Some(d);
                }
                Output::Persist(_) | Output::ViewInstalled { .. } => {}
            }
        }
        delivered
    }

    /// Submits one batch of fresh requests to the leader and runs until every
    /// replica delivered the resulting decision.
    fn decide_one(&mut self, batch: usize) {
        let mut delivered = 0;
        for _ in 0..batch {
            self.counter += 1;
            let mut req = vec![0u8; REQUEST_BYTES];
            req[..8].copy_from_slice(&self.counter.to_le_bytes());
            let out = self.replicas[0].handle(Input::Request(req));
            delivered += self.route(0, out);
        }
        while let Some((from, to, msg)) = self.queue.pop_front() {
            let out = self.replicas[to as usize].handle(Input::Message { from, msg });
            delivered += self.route(to, out);
        }
        assert_eq!(delivered, self.replicas.len(), "every replica decides");
    }
}

fn bench_decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for n in [4u32, 7] {
        for batch in [1usize, 100, 1000] {
            let mut cluster = Cluster::new(n, batch);
            group.throughput(Throughput::Elements(batch as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("n{n}"), format!("batch{batch}")),
                &batch,
                |b, &batch| b.iter(|| cluster.decide_one(batch)),
            );
        }
    }
    group.finish();
}

fn bench_certificate(c: &mut Criterion) {
    let mut group = c.benchmark_group("verify_decision_ed25519");
    for n in [4u32, 7] {
        let mut cluster = Cluster::new(n, 1);
        cluster.decide_one(1);
        let decision = cluster.last.clone().expect("a decision");
        let (_, verifier) = ed25519_keys(1, n);
        verify_decision(&decision, &verifier, n).expect("valid certificate");
        group.bench_function(BenchmarkId::new(format!("n{n}"), "q_signatures"), |b| {
            b.iter(|| verify_decision(black_box(&decision), &verifier, n).expect("valid"))
        });
    }
    group.finish();
}

/// Criterion's generated entry points.
mod entry {
    #![allow(missing_docs)]
    use super::*;
    criterion_group!(benches, bench_decisions, bench_certificate);
}
criterion_main!(entry::benches);
