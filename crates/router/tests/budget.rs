#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
// A counting global allocator is the only way to see what decoding allocates.
#![allow(unsafe_code)]
//! The limits and decoded-cost schemas `wire` gives the router's and the batcher intake's
//! message types, checked against the memory prost really allocates (as
//! `crates/wire/tests/budget.rs` does for the committer's types).

use prost::Message;
use std::alloc::{GlobalAlloc, Layout, System};
use std::any::TypeId;
use std::cell::Cell;
use wire::budget::{self, BudgetError};
use wire::{limits, pb};

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn grow(n: usize) {
    let _ = LIVE.try_with(|l| {
        let now = l.get().saturating_add(n);
        l.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

fn shrink(n: usize) {
    let _ = LIVE.try_with(|l| l.set(l.get().saturating_sub(n)));
}

fn reset() -> usize {
    let now = LIVE.try_with(Cell::get).unwrap_or(0);
    let _ = PEAK.try_with(|p| p.set(now));
    now
}

fn peak() -> usize {
    PEAK.try_with(Cell::get).unwrap_or(0)
}

struct Counting;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrink(layout.size());
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grow(new_size);
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        shrink(layout.size());
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What decoding `bytes` allocated: (held by the decoded value, peak while decoding).
fn allocated_by_decode<M: Message + Default>(bytes: &[u8]) -> (usize, usize) {
    let before = reset();
    let m = M::decode(bytes).unwrap();
    let held = LIVE.try_with(Cell::get).unwrap_or(0) - before;
    let peak = peak() - before;
    drop(m);
    (held, peak)
}

/// The bound covers what the decoded message holds and is not far above it. While
/// decoding, prost copies a bytes field through an intermediate buffer, so the peak may
/// reach twice what the message holds; `wire::budget` counts what it holds.
fn bound_holds<M: Message + Default>(name: &str, m: &M, limit: limits::MessageLimit) {
    let bytes = m.encode_to_vec();
    assert!(bytes.len() <= limit.max_bytes, "{name}: {} bytes", bytes.len());
    let cost = budget::check(&bytes, limit.schema, limit.budget).unwrap();
    let (held, peak) = allocated_by_decode::<M>(&bytes);
    println!(
        "{name} of {} bytes: bound {}, held {held}, peak {peak}",
        bytes.len(),
        cost.bytes
    );
    assert!(
        cost.bytes >= held,
        "{name}: bound {} below the {held} bytes the message holds",
        cost.bytes
    );
    assert!(
        cost.bytes <= held * 4 + 4096,
        "{name}: bound {} vs held {held}",
        cost.bytes
    );
    assert!(
        peak <= cost.bytes * 2 + 64,
        "{name}: peak {peak} vs bound {}",
        cost.bytes
    );
}

#[test]
fn every_router_and_intake_message_has_a_limit() {
    let types = [
        (TypeId::of::<pb::SubmitRequest>(), "pb::SubmitRequest"),
        (TypeId::of::<pb::SubmitResponse>(), "pb::SubmitResponse"),
        (TypeId::of::<pb::IntakeRequest>(), "pb::IntakeRequest"),
        (TypeId::of::<pb::IntakeResponse>(), "pb::IntakeResponse"),
    ];
    for (id, name) in types {
        let limit = limits::message_limit(id).unwrap_or_else(|| panic!("{name} has no limit"));
        assert_eq!(limit.schema.name, name);
    }
    // The largest envelope a router may accept fits both request types with their id.
    let largest = pb::IntakeRequest {
        id: u64::MAX,
        request: vec![0; limits::ROUTER_MAX_ENVELOPE_BYTES],
    };
    assert!(largest.encoded_len() <= limits::INTAKE_REQUEST.max_bytes);
    let largest = pb::SubmitRequest {
        id: u64::MAX,
        envelope: vec![0; limits::ROUTER_MAX_ENVELOPE_BYTES],
    };
    assert!(largest.encoded_len() <= limits::SUBMIT_REQUEST.max_bytes);
    let cost = budget::check(
        &largest.encode_to_vec(),
        limits::SUBMIT_REQUEST.schema,
        limits::SUBMIT_REQUEST.budget,
    );
    assert!(cost.is_ok(), "{cost:?}");
    // The largest intake answer fits the small limit.
    let answer = pb::IntakeResponse {
        id: u64::MAX,
        admitted: true,
        refusal: i32::MAX,
    };
    assert!(answer.encoded_len() <= limits::SMALL_REQUEST);
}

#[test]
fn the_bound_covers_what_decoding_allocates() {
    for size in [0, 1, 300, 4096, 1 << 20] {
        let env = vec![9u8; size];
        bound_holds(
            "SubmitRequest",
            &pb::SubmitRequest {
                id: 7,
                envelope: env.clone(),
            },
            limits::SUBMIT_REQUEST,
        );
        bound_holds(
            "IntakeRequest",
            &pb::IntakeRequest { id: 7, request: env },
            limits::INTAKE_REQUEST,
        );
    }
    bound_holds(
        "SubmitResponse",
        &pb::SubmitResponse {
            id: 1,
            code: 14,
            reason: "the batcher of shard 3 is unavailable: stream broke".into(),
        },
        limits::SUBMIT_RESPONSE,
    );
}

#[test]
fn repeated_fields_cannot_amplify_and_malformed_bytes_are_refused() {
    // A repeated envelope field: prost keeps the last, the bound counts each.
    let mut bytes = Vec::new();
    for _ in 0..1000 {
        bytes.extend(
            pb::SubmitRequest {
                id: 0,
                envelope: vec![1; 1000],
            }
            .encode_to_vec(),
        );
    }
    let cost = budget::scan(&bytes, &budget::SUBMIT_REQUEST).unwrap();
    assert!(cost.bytes >= 1_000_000, "{cost:?}");
    let over = vec![
        pb::SubmitRequest {
            id: 0,
            envelope: vec![1; 1 << 20]
        }
        .encode_to_vec();
        3
    ]
    .concat();
    assert!(matches!(
        budget::check(
            &over,
            limits::SUBMIT_REQUEST.schema,
            limits::SUBMIT_REQUEST.budget
        ),
        Err(BudgetError::OverBudget { .. })
    ));
    for bad in [
        vec![0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
        vec![0x13],
        vec![0x12, 0x05, 0x00],
    ] {
        assert!(matches!(
            budget::scan(&bad, &budget::SUBMIT_REQUEST),
            Err(BudgetError::Malformed { .. })
        ));
        assert!(matches!(
            budget::scan(&bad, &budget::INTAKE_REQUEST),
            Err(BudgetError::Malformed { .. })
        ));
    }
}
