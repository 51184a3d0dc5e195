//! Criterion benches of the token endorsement path: `cargo bench -p endorser --bench
//! endorse`. Results are recorded in `docs/benchmarks.md` ("## Token endorsement").
//!
//! - `endorse/transfer_1in_2out`: one endorser's whole decision for a transfer of one
//!   input into payee and change — shape and issuer checks, the creator's Ed25519
//!   signature, the input checks, the settlement tx, its endorsement bytes and the BLS
//!   partial signature (what an endorser does per request besides reading the state);
//! - `endorse/issue_1out`: the same for an issue;
//! - `wallet/aggregate_t{3,5,10}`: the wallet's work once it has t partials: verify each
//!   against its share key, aggregate (Lagrange in G2), verify the aggregate under the
//!   group key;
//! - `wallet/aggregate_only_t{3,5,10}`: the aggregation alone;
//! - `committer/verify_aggregate`: the sigverifier's check of one settlement tx.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use criterion::{Criterion, criterion_group, criterion_main};
use endorser::EndorserCore;
use std::hint::black_box;
use token::{Action, Output, Policy, Request, Settlement, Token};

fn addr(k: &crypto::SigningKey) -> token::Address {
    k.public_key().as_bytes().try_into().unwrap()
}

fn bench(c: &mut Criterion) {
    let set = crypto::deal_threshold_keys(3, 5, "bench").unwrap();
    let issuer = crypto::derive_signing_key(crypto::Scheme::Ed25519, "issuer");
    let alice = crypto::derive_signing_key(crypto::Scheme::Ed25519, "alice");
    let policy = Policy {
        issuers: vec![addr(&issuer)],
    };
    let core = EndorserCore::new(set.shares[0].clone(), &set.public, "token".into(), 0, policy).unwrap();
    let held = Token {
        owner: addr(&alice),
        token_type: "CBDC".into(),
        quantity: 1000,
        tx_id: "t0".into(),
        index: 0,
        sender: None,
    };
    let value = held.encode();
    let out = |owner, q| Output {
        owner,
        token_type: "CBDC".into(),
        quantity: q,
    };
    let transfer = Request::new(
        Action::Transfer,
        b"nonce".to_vec(),
        addr(&alice),
        vec![held.key()],
        vec![out(addr(&issuer), 300), out(addr(&alice), 700)],
    )
    .sign(&alice);
    let issue = Request::new(
        Action::Issue,
        b"nonce".to_vec(),
        addr(&issuer),
        vec![],
        vec![out(addr(&alice), 1000)],
    )
    .sign(&issuer);
    let mut g = c.benchmark_group("endorse");
    g.bench_function("transfer_1in_2out", |b| {
        b.iter(|| {
            black_box(
                core.endorse(
                    &core.prepare(&transfer, token::request::unix_now()).unwrap(),
                    &[Some((&value, 0))],
                )
                .unwrap(),
            )
        });
    });
    g.bench_function("issue_1out", |b| {
        b.iter(|| {
            black_box(
                core.endorse(&core.prepare(&issue, token::request::unix_now()).unwrap(), &[])
                    .unwrap(),
            )
        })
    });
    g.finish();

    let message = Settlement::build(&transfer, "token", 0).endorsement_bytes();
    let mut g = c.benchmark_group("wallet");
    for t in [3u32, 5, 10] {
        let n = 2 * t - 1;
        let set = crypto::deal_threshold_keys(t, n, "bench-agg").unwrap();
        let partials: Vec<_> = set
            .shares
            .iter()
            .take(t as usize)
            .map(|s| crypto::sign_namespace_endorsement_partial(s, &message))
            .collect();
        g.bench_function(format!("aggregate_t{t}"), |b| {
            b.iter(|| {
                for p in &partials {
                    crypto::verify_namespace_endorsement_partial(&set.public, &message, p).unwrap();
                }
                let sig = crypto::aggregate_partials(&set.public, &partials).unwrap();
                crypto::verify_namespace_endorsement(set.public.group_public_key(), &message, &sig).unwrap();
                black_box(sig)
            });
        });
        g.bench_function(format!("aggregate_only_t{t}"), |b| {
            b.iter(|| black_box(crypto::aggregate_partials(&set.public, &partials).unwrap()));
        });
    }
    g.finish();
    let partials: Vec<_> = set
        .shares
        .iter()
        .take(3)
        .map(|s| crypto::sign_namespace_endorsement_partial(s, &message))
        .collect();
    let sig = crypto::aggregate_partials(&set.public, &partials).unwrap();
    c.bench_function("committer/verify_aggregate", |b| {
        b.iter(|| {
            crypto::verify_namespace_endorsement(set.public.group_public_key(), &message, &sig).unwrap()
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
