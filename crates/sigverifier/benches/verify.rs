//! Criterion benches of the signature verifier: `cargo bench -p sigverifier --bench verify`.
//!
//! Per scheme, a batch of 500 single-namespace txs, one endorsement each, distinct
//! signers per namespace and distinct messages, verified
//! - `single`: `Policies::verify_tx` tx by tx on one thread (the serial baseline);
//! - `single_par`: `verify_tx` tx by tx, rayon-parallel over all cores (no batch equation);
//! - `batch_1t`: `Verifier` with 1 thread (batch equation, no parallelism);
//! - `batch_Nt`: `Verifier` with one thread per core (batch equation and parallelism);
//! - `batch_Nt_1pct_bad`: the same with 5 bad signatures spread over the batch.
//!
//! `chunks_500/*` varies the chunk size (signatures per crypto batch call).
//! `service_500/*` goes through the gRPC service and client on loopback.
//! `raw/<scheme>` is one `crypto::verify_namespace_endorsement` call: the per-core ceiling.
//! Results are recorded in `docs/benchmarks.md` ("## Signature verifier").

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use sigverifier::batch::Chunks;
use sigverifier::{Policies, Verifier};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;
use types::endorsement::namespace_signing_bytes;
use types::{Endorsement, Tx, TxId, TxNamespace, Write};

const BATCH: usize = 500;
/// Namespaces (and so policy keys) per scheme in a batch.
const NAMESPACES: usize = 8;

type Batch = Vec<(TxId, Arc<Tx>)>;

/// Policies for `NAMESPACES` namespaces of `scheme`, and a batch of txs over them; the
/// txs at the indices in `bad` carry a signature by a stranger.
fn setup(scheme: crypto::Scheme, bad: &[usize]) -> (Policies, Batch) {
    let mut policies = Policies::new();
    let keys: Vec<crypto::SigningKey> = (0..NAMESPACES)
        .map(|i| {
            let sk = crypto::derive_signing_key(scheme, &format!("ns{i}"));
            let p = sigverifier::policy_of(&sk.public_key());
            policies.set(&format!("ns{i}"), &p).unwrap();
            sk
        })
        .collect();
    let stranger = crypto::derive_signing_key(scheme, "stranger");
    let batch = (0..BATCH)
        .map(|i| {
            let id = TxId(format!("{:064x}", i));
            let ns = TxNamespace {
                ns_id: format!("ns{}", i % NAMESPACES),
                ns_version: 1,
                read_writes: vec![types::ReadWrite {
                    key: format!("utxo-{i}").into_bytes(),
                    version: Some(3),
                    value: vec![7; 64],
                }],
                blind_writes: vec![Write {
                    key: format!("out-{i}").into_bytes(),
                    value: vec![9; 64],
                }],
                ..Default::default()
            };
            let signer = if bad.contains(&i) {
                &stranger
            } else {
                &keys[i % NAMESPACES]
            };
            let sig = crypto::sign_namespace_endorsement(signer, &namespace_signing_bytes(&id, &ns, &[]));
            let tx = Tx {
                namespaces: vec![ns],
                endorsements: vec![vec![Endorsement {
                    signature: sig.into_bytes(),
                    ..Default::default()
                }]],
                metadata: vec![],
            };
            (id, Arc::new(tx))
        })
        .collect();
    (policies, batch)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn verify_500(c: &mut Criterion) {
    let n = cores();
    let one = Verifier::new(1).unwrap();
    let all = Verifier::new(n).unwrap();
    let bad: Vec<usize> = (0..5).map(|k| 50 + k * 100).collect();
    for scheme in crypto::Scheme::ALL {
        let mut group = c.benchmark_group(format!("verify_500/{scheme}"));
        group.throughput(Throughput::Elements(BATCH as u64));
        group.sampling_mode(SamplingMode::Flat);
        let (policies, batch) = setup(scheme, &[]);
        let (_, bad_batch) = setup(scheme, &bad);
        assert!(all.verify(&policies, &batch).iter().all(Option::is_none));
        assert_eq!(
            all.verify(&policies, &bad_batch)
                .iter()
                .filter(|v| v.is_some())
                .count(),
            bad.len()
        );
        group.bench_function("single", |b| {
            b.iter(|| {
                batch
                    .iter()
                    .map(|(id, tx)| policies.verify_tx(id, tx).is_ok())
                    .filter(|ok| *ok)
                    .count()
            })
        });
        group.bench_function(BenchmarkId::new("single_par", format!("{n}t")), |b| {
            b.iter(|| {
                all.verify_each(&policies, &batch)
                    .iter()
                    .filter(|v| v.is_none())
                    .count()
            })
        });
        group.bench_function("batch_1t", |b| {
            b.iter(|| one.verify(black_box(&policies), &batch))
        });
        group.bench_function(BenchmarkId::new("batch", format!("{n}t")), |b| {
            b.iter(|| all.verify(black_box(&policies), &batch))
        });
        group.bench_function(BenchmarkId::new("batch_1pct_bad", format!("{n}t")), |b| {
            b.iter(|| all.verify(black_box(&policies), &bad_batch))
        });
        group.finish();
    }
}

/// Chunk sizes (signatures per crypto batch call) with and without 5 bad signatures.
fn chunks(c: &mut Criterion) {
    let n = cores();
    let bad: Vec<usize> = (0..5).map(|k| 50 + k * 100).collect();
    let mut group = c.benchmark_group("chunks_500");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sampling_mode(SamplingMode::Flat);
    for (scheme, sizes) in [
        (crypto::Scheme::Ed25519, [32usize, 64, 128]),
        (crypto::Scheme::Bls12381, [16, 32, 128]),
    ] {
        let (policies, batch) = setup(scheme, &[]);
        let (_, bad_batch) = setup(scheme, &bad);
        for size in sizes {
            let v = Verifier::new(n)
                .unwrap()
                .with_chunks(Chunks::uniform(std::num::NonZeroUsize::new(size).unwrap()));
            group.bench_function(BenchmarkId::new(format!("{scheme}/good"), size), |b| {
                b.iter(|| v.verify(black_box(&policies), &batch))
            });
            group.bench_function(BenchmarkId::new(format!("{scheme}/1pct_bad"), size), |b| {
                b.iter(|| v.verify(black_box(&policies), &bad_batch))
            });
        }
    }
    group.finish();
}

/// Through the gRPC service on loopback: one client, 1 or 4 batches of 500 in flight.
fn service(c: &mut Criterion) {
    use clients::verifier::VerifierClient;
    use sigverifier::service::{ServiceConfig, VerifierService};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = VerifierService::new(
        Verifier::new(cores()).unwrap(),
        ServiceConfig::default(),
        std::sync::Arc::new(
            sigverifier::metrics::Metrics::register(&telemetry::Registry::detached("sigverifier")).unwrap(),
        ),
    );
    let limits = ServiceConfig::default().server;
    let _serving = rt
        .block_on(async { wire::node::serve(listener, &limits, |b| b.add_service(svc.into_server())) })
        .unwrap();
    let client = rt.block_on(VerifierClient::connect(&addr.to_string())).unwrap();
    let mut group = c.benchmark_group("service_500");
    group.sampling_mode(SamplingMode::Flat);
    for scheme in [crypto::Scheme::Ed25519, crypto::Scheme::Bls12381] {
        let (_, batch) = setup(scheme, &[]);
        rt.block_on(async {
            for i in 0..NAMESPACES {
                let sk = crypto::derive_signing_key(scheme, &format!("ns{i}"));
                let p = sigverifier::policy_of(&sk.public_key());
                client.set_policy(&format!("ns{i}"), &p).await.unwrap();
            }
        });
        for in_flight in [1usize, 4] {
            group.throughput(Throughput::Elements((BATCH * in_flight) as u64));
            group.bench_function(
                BenchmarkId::new(scheme.to_string(), format!("{in_flight}_in_flight")),
                |b| {
                    b.iter(|| {
                        rt.block_on(async {
                            let calls: Vec<_> = (0..in_flight)
                                .map(|_| {
                                    let client = client.clone();
                                    let batch = batch.clone();
                                    tokio::spawn(async move { client.verify(batch).await })
                                })
                                .collect();
                            for call in calls {
                                let verdicts = call.await.unwrap().unwrap();
                                assert!(verdicts.iter().all(Option::is_none));
                            }
                        })
                    })
                },
            );
        }
    }
    group.finish();
}

fn raw(c: &mut Criterion) {
    let mut group = c.benchmark_group("raw");
    group.throughput(Throughput::Elements(1));
    for scheme in crypto::Scheme::ALL {
        let (policies, batch) = setup(scheme, &[]);
        let (id, tx) = &batch[0];
        let key = policies.key(&tx.namespaces[0].ns_id).unwrap().clone();
        let msg = namespace_signing_bytes(id, &tx.namespaces[0], &tx.metadata);
        let sig = crypto::Signature::from_bytes(tx.endorsements[0][0].signature.clone());
        group.bench_function(scheme.to_string(), |b| {
            b.iter(|| crypto::verify_namespace_endorsement(black_box(&key), black_box(&msg), black_box(&sig)))
        });
    }
    group.finish();
}

/// Criterion's generated entry points carry no docs.
mod harness {
    #![allow(missing_docs)]
    use super::*;
    criterion_group! {
        name = benches;
        config = Criterion::default()
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));
        targets = raw, verify_500, chunks, service
    }
}
criterion_main!(harness::benches);
