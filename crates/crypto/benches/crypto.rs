//! Criterion benches for the crypto crate: `cargo bench -p crypto`.
//!
//! Results and the machine they ran on are recorded in `docs/benchmarks.md` ("## Crypto").

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use crypto::*;

/// A 256-byte message, about the size of a namespace read-write set digest plus metadata.
const MSG: [u8; 256] = [0x5a; 256];

fn single(c: &mut Criterion) {
    let mut group = c.benchmark_group("single");
    for scheme in Scheme::ALL {
        let key = derive_signing_key(scheme, "bench");
        let pk = key.public_key();
        let sig = sign_namespace_endorsement(&key, &MSG);
        group.bench_function(BenchmarkId::new("sign", scheme), |b| {
            b.iter(|| sign_namespace_endorsement(black_box(&key), black_box(&MSG)))
        });
        group.bench_function(BenchmarkId::new("verify", scheme), |b| {
            b.iter(|| verify_namespace_endorsement(black_box(&pk), black_box(&MSG), black_box(&sig)))
        });
    }
    group.finish();
}

/// `size` namespace endorsements by distinct keys of `scheme` over distinct messages;
/// `bad_percent` of them, spread evenly, sign another message instead.
struct Endorsements {
    pks: Vec<PublicKey>,
    msgs: Vec<Vec<u8>>,
    sigs: Vec<Signature>,
}

fn endorsements(scheme: Scheme, size: usize, bad_percent: usize) -> Endorsements {
    let keys: Vec<SigningKey> = (0..size)
        .map(|i| derive_signing_key(scheme, &format!("bench-{i}")))
        .collect();
    let msgs: Vec<Vec<u8>> = (0..size)
        .map(|i| format!("tx-{i}").repeat(32).into_bytes())
        .collect();
    let sigs = keys
        .iter()
        .zip(&msgs)
        .enumerate()
        .map(|(i, (k, m))| {
            let bad = bad_percent > 0 && (i * bad_percent) % 100 < bad_percent;
            sign_namespace_endorsement(k, if bad { b"another message" } else { m })
        })
        .collect();
    Endorsements {
        pks: keys.iter().map(SigningKey::public_key).collect(),
        msgs,
        sigs,
    }
}

impl Endorsements {
    fn items(&self) -> Vec<SignedMessage<'_>> {
        (0..self.sigs.len())
            .map(|i| SignedMessage {
                public_key: &self.pks[i],
                message: &self.msgs[i],
                signature: &self.sigs[i],
            })
            .collect()
    }
}

/// Distinct signers and messages, as in a block of endorsed transactions.
fn batch_verify(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_verify");
    for scheme in Scheme::ALL {
        for size in [64usize, 512] {
            let fixture = endorsements(scheme, size, 0);
            let items = fixture.items();
            assert!(verify_namespace_endorsements(&items).iter().all(|ok| *ok));
            group.throughput(Throughput::Elements(size as u64));
            group.bench_function(BenchmarkId::new(scheme.name(), size), |b| {
                b.iter(|| verify_namespace_endorsements(black_box(&items)))
            });
        }
    }
    group.finish();
}

/// Ed25519 batches signed by one key, as a namespace's txs are under its policy.
fn batch_verify_one_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_verify_one_key");
    let key = derive_signing_key(Scheme::Ed25519, "bench-policy");
    let pk = key.public_key();
    for size in [64usize, 512] {
        let msgs: Vec<Vec<u8>> = (0..size)
            .map(|i| format!("tx-{i}").repeat(32).into_bytes())
            .collect();
        let sigs: Vec<Signature> = msgs.iter().map(|m| sign_namespace_endorsement(&key, m)).collect();
        let items: Vec<SignedMessage<'_>> = (0..size)
            .map(|i| SignedMessage {
                public_key: &pk,
                message: &msgs[i],
                signature: &sigs[i],
            })
            .collect();
        assert!(verify_namespace_endorsements(&items).iter().all(|ok| *ok));
        group.throughput(Throughput::Elements(size as u64));
        group.bench_function(BenchmarkId::new("ed25519", size), |b| {
            b.iter(|| verify_namespace_endorsements(black_box(&items)))
        });
    }
    group.finish();
}

fn threshold(c: &mut Criterion) {
    let mut group = c.benchmark_group("threshold");
    for t in [3u32, 5, 10] {
        let n = 2 * t;
        let set = deal_threshold_keys(t, n, "bench").unwrap();
        let partials: Vec<PartialSignature> = set.shares[..t as usize]
            .iter()
            .map(|s| sign_namespace_endorsement_partial(s, &MSG))
            .collect();
        group.bench_function(BenchmarkId::new("partial_sign", t), |b| {
            b.iter(|| sign_namespace_endorsement_partial(black_box(&set.shares[0]), black_box(&MSG)))
        });
        group.bench_function(BenchmarkId::new("partial_verify", t), |b| {
            b.iter(|| {
                verify_namespace_endorsement_partial(&set.public, black_box(&MSG), black_box(&partials[0]))
            })
        });
        group.bench_function(BenchmarkId::new("aggregate", t), |b| {
            b.iter(|| aggregate_partials(black_box(&set.public), black_box(&partials)).unwrap())
        });
        let agg = aggregate_partials(&set.public, &partials).unwrap();
        group.bench_function(BenchmarkId::new("verify_aggregated", t), |b| {
            b.iter(|| {
                verify_namespace_endorsement(set.public.group_public_key(), black_box(&MSG), black_box(&agg))
            })
        });
    }
    group.finish();
}

fn multisig(c: &mut Criterion) {
    let mut group = c.benchmark_group("multisig");
    for n in [4usize, 7] {
        let keys: Vec<SigningKey> = (0..n)
            .map(|i| derive_signing_key(Scheme::Bls12381, &format!("consenter-{i}")))
            .collect();
        let pks: Vec<PublicKey> = keys.iter().map(SigningKey::public_key).collect();
        let sigs: Vec<Signature> = keys.iter().map(|k| sign_decision_certificate(k, &MSG)).collect();
        let agg = aggregate_signatures(&sigs).unwrap();
        group.bench_function(BenchmarkId::new("aggregate", n), |b| {
            b.iter(|| aggregate_signatures(black_box(&sigs)).unwrap())
        });
        group.bench_function(BenchmarkId::new("verify_aggregate", n), |b| {
            b.iter(|| {
                verify_aggregate_decision_certificate(black_box(&MSG), black_box(&pks), black_box(&agg))
            })
        });
    }
    group.finish();
}

/// 512 Ed25519 (128 BLS) endorsements, distinct keys, checked on one thread in batches of `group`
/// (1 = one by one), with a share of bad signatures spread evenly: the cost model behind
/// `policy::batch::Adaptive`.
fn in_groups(c: &mut Criterion) {
    let mut group = c.benchmark_group("in_groups");
    group.warm_up_time(std::time::Duration::from_millis(500));
    group.measurement_time(std::time::Duration::from_secs(2));
    group.sample_size(10);
    for (scheme, size, groups, bads) in [
        (
            Scheme::Ed25519,
            512usize,
            &[1usize, 2, 4, 8, 16, 32, 64, 128][..],
            &[0usize, 1, 5, 10, 20, 30][..],
        ),
        (
            Scheme::Bls12381,
            128,
            &[1, 2, 4, 8, 16, 32][..],
            &[0, 5, 10, 20][..],
        ),
    ] {
        in_groups_of(&mut group, scheme, size, groups, bads);
    }
    group.finish();
}

fn in_groups_of(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    scheme: Scheme,
    size: usize,
    groups: &[usize],
    bads: &[usize],
) {
    for &bad_percent in bads {
        let fixture = endorsements(scheme, size, bad_percent);
        let items = fixture.items();
        let expected = verify_namespace_endorsements_in_groups(&items, 1);
        group.throughput(Throughput::Elements(size as u64));
        for &g in groups {
            assert_eq!(verify_namespace_endorsements_in_groups(&items, g), expected);
            let name = format!("{}/bad{bad_percent}", scheme.name());
            group.bench_function(BenchmarkId::new(name, g), |b| {
                b.iter(|| verify_namespace_endorsements_in_groups(black_box(&items), g))
            });
        }
    }
}

/// Criterion's generated entry points carry no docs.
mod harness {
    #![allow(missing_docs)]
    use super::*;
    criterion_group!(
        benches,
        single,
        batch_verify,
        batch_verify_one_key,
        threshold,
        multisig,
        in_groups
    );
}
criterion_main!(harness::benches);
