#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! `Batcher::restore`: re-adopting persisted batches after a restart.

mod common;

use std::sync::Arc;

use batcher::{Baf, Input, Output, SignedBatch};
use common::{batcher, key, req};
use types::BatchId;

fn batch(primary: u32, seq: u64, term: u64, first: u32) -> Arc<SignedBatch> {
    let requests = vec![req(first, 10), req(first + 1, 10)];
    Arc::new(SignedBatch::sign(
        BatchId::new(0, primary, seq),
        term,
        requests,
        &key(primary),
    ))
}

#[test]
fn a_restarted_primary_readopts_its_batches_and_cuts_after_them() {
    let mut b = batcher(1);
    let (b1, b2) = (batch(1, 1, 0, 10), batch(1, 2, 0, 20));
    assert_eq!(
        b.restore(b1.clone()),
        vec![
            Output::Serve(b1.clone()),
            Output::SendBaf(Baf::sign(&b1, 1, &key(1)))
        ]
    );
    // Out of order, a repeat, another term or another primary: not adopted.
    assert_eq!(b.restore(batch(1, 3, 0, 30)), vec![]);
    assert_eq!(b.restore(b1.clone()), vec![]);
    assert_eq!(b.restore(batch(1, 2, 4, 20)), vec![]);
    assert_eq!(b.restore(batch(2, 2, 0, 20)), vec![]);
    assert_eq!(b.restore(b2.clone()).len(), 2);
    assert_eq!(b.next_seq(), Some(3));
    assert_eq!(b.unordered_batches(), 2);
    assert_eq!(b.in_flight(), (4, 40));
    // The restored requests are known: a resubmission is a duplicate.
    let out = b.handle(Input::Request(req(10, 10)));
    assert!(matches!(out[..], [Output::Refused { .. }]));
    // Both batches are unconfirmed (their acks were lost): the window of 2 is full, so
    // a new request waits until one is ordered, then goes into seq 3.
    b.handle(Input::Request(req(40, 10)));
    assert!(b.handle(Input::Tick(1_000)).is_empty());
    let out = b.handle(Input::Ordered {
        id: b1.id(),
        requests: b1.requests.clone(),
    });
    let cut: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::Persist(p) => Some(p.id().seq),
            _ => None,
        })
        .collect();
    assert_eq!(cut, vec![3]);
}

#[test]
fn a_restarted_secondary_readopts_verified_batches_and_acks_them_again() {
    let mut b = batcher(2);
    let b1 = batch(1, 1, 0, 10);
    let baf = Baf::sign(&b1, 2, &key(2));
    assert_eq!(
        b.restore(b1.clone()),
        vec![
            Output::Serve(b1.clone()),
            Output::SendBaf(baf.clone()),
            Output::AckPrimary { to: 1, baf }
        ]
    );
    let mut forged = (*batch(1, 2, 0, 20)).clone();
    forged.requests.pop();
    assert_eq!(b.restore(Arc::new(forged)), vec![]);
    assert_eq!(b.next_seq(), Some(2));
    // The next pull asks for seq 2.
    let out = b.handle(Input::Tick(1));
    assert_eq!(out, vec![Output::Pull(BatchId::new(0, 1, 2))]);
}
