//! The shard function's CRC-64 on a 300-byte request, in pieces as a request's content
//! is hashed (`types::digest::shard_of_pieces`), against the table implementation it
//! replaced.
//!
//! `cargo bench -p types --bench crc64`

#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let request: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
    let (a, rest) = request.split_at(180);
    let (_signature, b) = rest.split_at(70);
    const TABLES: crc::Crc<u64, crc::Table<16>> = crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_XZ);
    let mut group = c.benchmark_group("shard_crc64_300B");
    group.bench_function("fast", |x| {
        x.iter(|| types::digest::shard_of_pieces(black_box(&[a, b]), 2))
    });
    group.bench_function("slice_by_16_tables", |x| {
        x.iter(|| {
            let mut d = TABLES.digest();
            d.update(black_box(a));
            d.update(black_box(b));
            ((d.finalize() & 0xffff) as u32) % 2
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
