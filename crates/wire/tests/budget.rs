#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
// A counting global allocator is the only way to see what decoding allocates.
#![allow(unsafe_code)]
//! The decoded-cost bound of `wire::budget` against the memory prost really allocates
//! (counted by a global allocator), for honest messages and for the shapes that amplify
//! memory the most, and the refusal of the amplification attack before decoding; the same
//! for the router's and the batcher intake's message types.

use prost::Message;
use std::alloc::{GlobalAlloc, Layout, System};
use std::any::TypeId;
use std::cell::Cell;
use wire::budget::{self, BudgetError};
use wire::{limits, pb};

thread_local! {
    /// Bytes this thread holds now, and the most it held since the last reset (tests run
    /// on parallel threads).
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

/// Starts a measurement: the peak is reset to what is held now.
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
        // While moving, both buffers may exist.
        grow(new_size);
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        shrink(layout.size());
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What decoding `bytes` allocated: (held by the decoded value, peak while decoding).
fn held_and_peak<M: Message + Default>(bytes: &[u8]) -> (usize, usize) {
    let before = reset();
    let m = M::decode(bytes).unwrap();
    let held = LIVE.try_with(Cell::get).unwrap_or(0) - before;
    let peak = peak() - before;
    drop(m);
    (held, peak)
}

fn honest_tx(i: usize) -> pb::VcTx {
    pb::VcTx {
        tx_id: format!("{i:064x}"),
        block: 7,
        index: i as u32,
        tx: Some(pb::Tx {
            namespaces: vec![pb::TxNamespace {
                ns_id: "token".into(),
                ns_version: 0,
                reads_only: vec![pb::Read {
                    key: format!("in-{i}").into_bytes(),
                    version: Some(3),
                }],
                read_writes: vec![pb::ReadWrite {
                    key: format!("spent-{i}").into_bytes(),
                    version: Some(1),
                    value: vec![7; 40],
                }],
                blind_writes: vec![pb::Write {
                    key: format!("out-{i}").into_bytes(),
                    value: vec![9; 80],
                }],
            }],
            endorsements: vec![pb::Endorsements {
                endorsements_with_identity: vec![pb::EndorsementWithIdentity {
                    endorsement: vec![1; 64],
                    identity: Some(pb::Identity {
                        msp_id: "org1".into(),
                        creator: Some(pb::identity::Creator::CertificateId("c1".into())),
                    }),
                }],
            }],
            metadata: vec![b"m".to_vec()],
        }),
        prelim_status: 0,
    }
}

/// A batch of one tx whose namespace holds `n` empty reads: 2 bytes each on the wire.
fn empty_reads(n: usize) -> pb::VcBatch {
    let mut tx = honest_tx(0);
    tx.tx.as_mut().unwrap().namespaces[0].reads_only = vec![pb::Read::default(); n];
    pb::VcBatch { txs: vec![tx] }
}

/// A batch of `n` txs that are empty on the wire.
fn empty_txs(n: usize) -> pb::VcBatch {
    pb::VcBatch {
        txs: vec![pb::VcTx::default(); n],
    }
}

/// A batch of one tx of `n` empty namespaces.
fn empty_namespaces(n: usize) -> pb::VcBatch {
    let mut tx = honest_tx(0);
    tx.tx.as_mut().unwrap().namespaces = vec![pb::TxNamespace::default(); n];
    pb::VcBatch { txs: vec![tx] }
}

#[test]
fn the_bound_covers_what_decoding_allocates() {
    let shapes: Vec<(&str, pb::VcBatch)> = vec![
        (
            "honest 500",
            pb::VcBatch {
                txs: (0..500).map(honest_tx).collect(),
            },
        ),
        (
            "honest 1",
            pb::VcBatch {
                txs: vec![honest_tx(1)],
            },
        ),
        ("empty reads", empty_reads(50_000)),
        ("empty txs", empty_txs(50_000)),
        ("empty namespaces", empty_namespaces(20_000)),
        ("empty batch", pb::VcBatch::default()),
    ];
    for (name, batch) in shapes {
        let bytes = batch.encode_to_vec();
        let cost = budget::scan(&bytes, &budget::VC_BATCH).unwrap();
        let real = held_and_peak::<pb::VcBatch>(&bytes).1;
        assert!(
            cost.bytes >= real,
            "{name}: bound {} below the {real} bytes decoding allocated",
            cost.bytes
        );
        // And not absurdly above it: the bound must not refuse honest traffic.
        assert!(
            cost.bytes <= real * 4 + 4096,
            "{name}: bound {} vs real {real}",
            cost.bytes
        );
    }
}

#[test]
fn the_verify_stream_bound_covers_what_decoding_allocates() {
    let req = pb::VerifyStreamRequest {
        kind: Some(pb::verify_stream_request::Kind::Batch(pb::VerifyBatch {
            request_id: 1,
            txs: (0..300)
                .map(|i| {
                    let t = honest_tx(i);
                    pb::VerifyTx {
                        tx_id: t.tx_id,
                        tx: t.tx,
                    }
                })
                .collect(),
        })),
    };
    let bytes = req.encode_to_vec();
    let cost = budget::scan(&bytes, &budget::VERIFY_STREAM_REQUEST).unwrap();
    let real = held_and_peak::<pb::VerifyStreamRequest>(&bytes).1;
    assert!(cost.bytes >= real, "bound {} below {real}", cost.bytes);
}

#[test]
fn an_amplifying_message_is_refused_before_decoding() {
    // 4 Mi empty reads: 8 MiB on the wire would decode into hundreds of MiB.
    let bytes = empty_reads(3 << 20).encode_to_vec();
    assert!(bytes.len() <= limits::VC_BATCH.max_bytes, "{}", bytes.len());
    let before = reset();
    let err = budget::check(&bytes, limits::VC_BATCH.schema, limits::VC_BATCH.budget).unwrap_err();
    let during = peak() - before;
    assert!(matches!(err, BudgetError::OverBudget { .. }), "{err}");
    assert!(during < 4096, "the check allocated {during} bytes");
    // The honest 500-tx batch the sidecar sends is far below the limit.
    let honest = pb::VcBatch {
        txs: (0..500).map(honest_tx).collect(),
    }
    .encode_to_vec();
    let cost = budget::check(&honest, limits::VC_BATCH.schema, limits::VC_BATCH.budget).unwrap();
    assert!(
        cost.bytes < limits::VC_BATCH.budget.max_decoded_bytes / 8,
        "{cost:?}"
    );
}

#[test]
fn malformed_bytes_are_refused_and_never_panic() {
    let honest = pb::VcBatch {
        txs: (0..20).map(honest_tx).collect(),
    }
    .encode_to_vec();
    // Truncations at every length and a few corruptions: the walk answers, never panics,
    // and agrees with prost on what is malformed at the top level.
    for cut in 0..honest.len() {
        let _ = budget::scan(&honest[..cut], &budget::VC_BATCH);
    }
    for bad in [
        vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
        vec![0x0b],
        vec![0x0a, 0x05, 0x00],
        vec![0x80; 11],
    ] {
        assert!(matches!(
            budget::scan(&bad, &budget::VC_BATCH),
            Err(BudgetError::Malformed { .. })
        ));
        assert!(pb::VcBatch::decode(bad.as_slice()).is_err());
    }
}

// ---- the router's and the batcher intake's messages

/// The bound covers what the decoded message holds and is not far above it. While
/// decoding, prost copies a bytes field through an intermediate buffer, so the peak may
/// reach twice what the message holds; `wire::budget` counts what it holds.
fn bound_holds<M: Message + Default>(name: &str, m: &M, limit: limits::MessageLimit) {
    let bytes = m.encode_to_vec();
    assert!(bytes.len() <= limit.max_bytes, "{name}: {} bytes", bytes.len());
    let cost = budget::check(&bytes, limit.schema, limit.budget).unwrap();
    let (held, peak) = held_and_peak::<M>(&bytes);
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
        (TypeId::of::<pb::SubmitBatch>(), "pb::SubmitBatch"),
        (TypeId::of::<pb::SubmitAnswers>(), "pb::SubmitAnswers"),
        (TypeId::of::<pb::IntakeBatch>(), "pb::IntakeBatch"),
        (TypeId::of::<pb::IntakeAnswers>(), "pb::IntakeAnswers"),
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
    // A batch holds the largest envelope, and its intake batch (same framing) fits too.
    let one = |id| pb::SubmitRequest {
        id,
        envelope: vec![0; limits::ROUTER_MAX_ENVELOPE_BYTES],
    };
    let batch = pb::SubmitBatch {
        requests: vec![one(u64::MAX), one(1)],
    };
    assert!(batch.encoded_len() <= limits::SUBMIT_BATCH.max_bytes);
    let cost = budget::check(
        &batch.encode_to_vec(),
        limits::SUBMIT_BATCH.schema,
        limits::SUBMIT_BATCH.budget,
    );
    assert!(cost.is_ok(), "{cost:?}");
    // As many answers as a message may carry requests fit the answer limits.
    let answers = pb::IntakeAnswers {
        answers: vec![answer; limits::INTAKE_BATCH.budget.max_items],
    };
    assert!(answers.encoded_len() <= limits::INTAKE_ANSWERS.max_bytes);
    let reason = "r".repeat(300);
    let answers = pb::SubmitAnswers {
        answers: vec![
            pb::SubmitResponse {
                id: u64::MAX,
                code: 14,
                reason,
            };
            limits::SUBMIT_BATCH.budget.max_items
        ],
    };
    assert!(answers.encoded_len() <= limits::SUBMIT_ANSWERS.max_bytes);
}

#[test]
fn the_bound_covers_what_decoding_router_messages_allocates() {
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
