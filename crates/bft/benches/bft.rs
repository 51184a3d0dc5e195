//! Throughput of the engine in one process with real Ed25519 signatures:
//! n replicas, in-memory message passing, no WAL I/O (persist outputs are dropped),
//! ~200-byte requests, batch sizes 1 / 100 / 1000. One iteration = one decision
//! delivered by every replica. Also: verifying one decision certificate with `q`
//! Ed25519 signatures one by one, with Ed25519 batch verification, and as one BLS
//! multi-signature (crates/crypto, keys registered with proof of possession).
//!
//! `cargo bench -p bft`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

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
                Output::Persist(_)
                | Output::ViewInstalled { .. }
                | Output::Installed { .. }
                | Output::Refused { .. } => {}
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
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for n in [4u32, 7] {
        let mut cluster = Cluster::new(n, 1);
        cluster.decide_one(1);
        let decision = cluster.last.clone().expect("a decision");
        let (_, verifier) = ed25519_keys(1, n);
        verify_decision(
            &decision,
            &bft::ChainId::default(),
            &verifier,
            &bft::Members::contiguous(n),
        )
        .expect("valid certificate");
        group.bench_function(BenchmarkId::new(format!("n{n}"), "q_signatures"), |b| {
            b.iter(|| {
                verify_decision(
                    black_box(&decision),
                    &bft::ChainId::default(),
                    &verifier,
                    &bft::Members::contiguous(n),
                )
                .expect("valid")
            })
        });
    }
    group.finish();
}

/// The same certificate three ways: `q` Ed25519 signatures checked one by one (the
/// engine's `verify_decision`), the `q` Ed25519 signatures batch-verified, and a BLS
/// aggregate of `q` signatures over the same vote bytes checked with one pairing
/// equation against the `q` public keys.
fn bench_certificate_schemes(c: &mut Criterion) {
    use crypto::{Scheme, derive_signing_key};
    let mut group = c.benchmark_group("verify_certificate");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for n in [4u32, 7] {
        let q = bft::Quorum::new(n).q as usize;
        let mut cluster = Cluster::new(n, 1);
        cluster.decide_one(1);
        let decision = cluster.last.clone().expect("a decision");
        let cert = &decision.certificate;
        let bytes = bft::certificate::vote_bytes(
            &bft::ChainId::default(),
            cert.phase,
            cert.instance,
            cert.view,
            cert.seq,
            &cert.digest,
        );

        let (signers, _) = ed25519_keys(1, n);
        let pks: Vec<ed25519_dalek::VerifyingKey> = cert
            .signatures
            .iter()
            .map(|(id, _)| {
                ed25519_dalek::VerifyingKey::from_bytes(&signers[*id as usize].public_key()).expect("key")
            })
            .collect();
        let sigs: Vec<ed25519_dalek::Signature> = cert
            .signatures
            .iter()
            .map(|(_, s)| ed25519_dalek::Signature::from_slice(&s.0).expect("sig"))
            .collect();
        let msgs: Vec<&[u8]> = vec![bytes.as_slice(); sigs.len()];
        ed25519_dalek::verify_batch(&msgs, &sigs, &pks).expect("batch valid");
        group.bench_function(BenchmarkId::new(format!("n{n}"), "ed25519_batch"), |b| {
            b.iter(|| ed25519_dalek::verify_batch(black_box(&msgs), &sigs, &pks).expect("valid"))
        });

        let bls: Vec<crypto::SigningKey> = (0..q)
            .map(|i| derive_signing_key(Scheme::Bls12381, &format!("bench-bls-{i}")))
            .collect();
        for k in &bls {
            let pop = crypto::prove_possession(k).expect("pop");
            crypto::verify_possession(&k.public_key(), &pop).expect("pop valid");
        }
        let keys: Vec<crypto::PublicKey> = bls.iter().map(crypto::SigningKey::public_key).collect();
        let parts: Vec<crypto::Signature> = bls
            .iter()
            .map(|k| crypto::sign_decision_certificate(k, &bytes))
            .collect();
        let agg = crypto::aggregate_signatures(&parts).expect("aggregate");
        crypto::verify_aggregate_decision_certificate(&bytes, &keys, &agg).expect("aggregate valid");
        group.bench_function(BenchmarkId::new(format!("n{n}"), "bls_aggregate"), |b| {
            b.iter(|| {
                crypto::verify_aggregate_decision_certificate(black_box(&bytes), &keys, &agg).expect("valid")
            })
        });
        group.bench_function(
            BenchmarkId::new(format!("n{n}"), "bls_aggregate_q_then_verify"),
            |b| {
                b.iter(|| {
                    let agg = crypto::aggregate_signatures(black_box(&parts)).expect("aggregate");
                    crypto::verify_aggregate_decision_certificate(&bytes, &keys, &agg).expect("valid")
                })
            },
        );
    }
    // What one vote costs the signer in each scheme.
    let ed = derive_signing_key(Scheme::Ed25519, "bench-sign");
    let bl = derive_signing_key(Scheme::Bls12381, "bench-sign");
    group.bench_function("sign_vote/ed25519", |b| {
        b.iter(|| crypto::sign_decision_certificate(&ed, black_box(b"fabrx/bft/v1/commit 0123456789")))
    });
    group.bench_function("sign_vote/bls", |b| {
        b.iter(|| crypto::sign_decision_certificate(&bl, black_box(b"fabrx/bft/v1/commit 0123456789")))
    });
    group.finish();
}

/// Criterion's generated entry points.
mod entry {
    #![allow(missing_docs)]
    use super::*;
    criterion_group!(
        benches,
        bench_decisions,
        bench_certificate,
        bench_certificate_schemes
    );
}
criterion_main!(entry::benches);
