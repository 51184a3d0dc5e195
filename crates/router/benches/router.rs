//! The router's admission per request on one core (`check_request`: size, envelope
//! decoding and structure, the client's signature when the network requires it, the
//! shard mapping and the request digest), for envelopes of about 300 bytes.
//!
//! `cargo bench -p router`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use router::check_request;

fn bench_admission(c: &mut Criterion) {
    let client = common::Client::new("bench");
    let envelopes: Vec<Vec<u8>> = (0..1024).map(|n| common::signed(&client, n)).collect();
    let open = common::config(2, &[]);
    let mut both = common::config(2, &[]);
    both.requests.format = router::RequestFormat::Both;
    let signed = common::config(2, &[&client]);
    let mut group = c.benchmark_group("router_admission");
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(envelopes.len() as u64));
    eprintln!("envelope bytes: {}", envelopes[0].len());
    for (name, cfg) in [
        ("open", &open),
        ("open_both_formats", &both),
        ("signed_ed25519", &signed),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                for e in &envelopes {
                    black_box(check_request(black_box(e), cfg).unwrap());
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_admission);
criterion_main!(benches);
