//! Fixtures shared by the batcher's table tests and property tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::sync::Arc;

use batcher::{Batcher, Config, Input, Output, Request, TermInfo};
use crypto::{Scheme, SigningKey, derive_signing_key};
use types::PartyId;

/// Parties of the test network (f = 1, so f+1 = 2 acks confirm a batch).
pub const N: u32 = 4;

/// The deterministic batcher key of party `p`.
pub fn key(p: PartyId) -> SigningKey {
    derive_signing_key(Scheme::Ed25519, &format!("fabrx-batcher-test-{p}"))
}

/// A config for party `party` of shard 0 in a network of `N` parties and `shards` shards:
/// batches of at most 3 requests / 250 bytes, timeout 50 ms, window 2, 4 unordered
/// batches, mempool of 6 requests / 500 bytes, forward after 100 ms, complain after 300 ms.
pub fn config(party: PartyId, shards: u32) -> Config {
    Config {
        party,
        shard: 0,
        parties: arma::Parties::contiguous(N),
        shards,
        keys: (1..=N)
            .map(|p| (p, key(p).public_key()))
            .collect::<BTreeMap<_, _>>(),
        max_request_bytes: NonZeroUsize::new(100).unwrap(),
        max_batch_requests: NonZeroU32::new(3).unwrap(),
        max_batch_bytes: NonZeroU64::new(250).unwrap(),
        batch_timeout_ms: 50,
        window: NonZeroU32::new(2).unwrap(),
        max_unordered_batches: NonZeroU32::new(4).unwrap(),
        mempool_max_requests: NonZeroUsize::new(6).unwrap(),
        mempool_max_bytes: NonZeroU64::new(500).unwrap(),
        ordered_memory: NonZeroUsize::new(1000).unwrap(),
        forward_timeout_ms: 100,
        complain_timeout_ms: 300,
    }
}

/// Party `party`'s batcher of shard 0 (one shard) at genesis.
pub fn batcher(party: PartyId) -> Batcher {
    Batcher::new(
        config(party, 1),
        key(party),
        TermInfo {
            term: 0,
            last_ordered_seq: 0,
        },
    )
    .unwrap()
}

/// A request of `len` bytes (at least 4) numbered `i`.
pub fn req(i: u32, len: usize) -> Request {
    let mut bytes = vec![0xab; len.max(4)];
    bytes[..4].copy_from_slice(&i.to_be_bytes());
    Arc::from(bytes)
}

/// One step of a table test: an input and the outputs it must produce, in order.
pub struct Step {
    /// What happens.
    pub input: Input,
    /// What the batcher must answer.
    pub expect: Vec<Output>,
}

/// A step.
pub fn step(input: Input, expect: Vec<Output>) -> Step {
    Step { input, expect }
}

/// Runs the steps, comparing values; names the failing step.
pub fn run(b: &mut Batcher, steps: Vec<Step>) {
    for (i, s) in steps.into_iter().enumerate() {
        let what = format!("{:?}", s.input);
        let got = b.handle(s.input);
        assert_eq!(got, s.expect, "step {i}: {}", &what[..what.len().min(200)]);
    }
}
