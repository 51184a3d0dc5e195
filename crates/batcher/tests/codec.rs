#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! The wire form of what batchers exchange (the `arma` conversions) and of the consenter
//! request (`batcher::codec`): round trips and the typed refusal of malformed messages.

mod common;

use batcher::codec::{CodecError, ConsenterRequest, decode_consenter_request, encode_consenter_request};
use batcher::{Baf, Complaint, ComplaintReason, Error, SignedBatch};
use common::{key, req};
use prost::Message as _;
use types::BatchId;
use wire::pb;

fn batch() -> SignedBatch {
    SignedBatch::sign(BatchId::new(0, 1, 7), 3, vec![req(1, 10), req(2, 20)], &key(1))
}

fn baf() -> Baf {
    Baf::sign(&batch(), 2, &key(2))
}

fn complaint() -> Complaint {
    Complaint::sign(0, 3, 4, ComplaintReason::BogusBatch, &key(4))
}

fn codec(what: &'static str) -> CodecError {
    CodecError { what }
}

#[test]
fn messages_round_trip() {
    let b = batch();
    let wire = pb::Batch::from(&b);
    assert_eq!((wire.term, wire.tx_count), (3, 2));
    assert_eq!(SignedBatch::try_from(wire).unwrap(), b);
    // A batch that went through bytes still verifies.
    let bytes = pb::Batch::from(&b).encode_to_vec();
    let decoded = SignedBatch::try_from(pb::Batch::decode(bytes.as_slice()).unwrap()).unwrap();
    assert!(decoded.signature_verifies(&key(1).public_key()));

    let a = baf();
    assert_eq!(Baf::try_from(pb::BatchAttestationFragment::from(&a)).unwrap(), a);
    let c = complaint();
    let wire = pb::Complaint::from(&c);
    assert_eq!(wire.reason, "bogus-batch");
    assert_eq!(Complaint::try_from(wire).unwrap(), c);
    let censorship = Complaint::sign(1, 9, 2, ComplaintReason::Censorship, &key(2));
    assert_eq!(
        Complaint::try_from(pb::Complaint::from(&censorship)).unwrap(),
        censorship
    );

    // A BAF or a complaint encodes directly, the same bytes as through the enum and as
    // the `arma` encoders the consenter uses.
    assert_eq!(encode_consenter_request(&a), arma::encode_baf(&a));
    assert_eq!(encode_consenter_request(&c), arma::encode_complaint(&c));
    assert_eq!(
        encode_consenter_request(&a),
        encode_consenter_request(&ConsenterRequest::from(a.clone()))
    );
    for request in [
        ConsenterRequest::from(a.clone()),
        ConsenterRequest::from(c.clone()),
    ] {
        let decoded = decode_consenter_request(&encode_consenter_request(&request)).unwrap();
        assert_eq!(decoded, request);
        match decoded {
            ConsenterRequest::Baf(b) => {
                assert!(b.verifies(&key(2).public_key()));
                assert!(b.primary_verifies(&key(1).public_key()));
            }
            ConsenterRequest::Complaint(c) => assert!(c.verifies(&key(4).public_key())),
        }
    }
}

#[test]
fn malformed_batches_are_refused_naming_the_field() {
    type Edit = fn(&mut pb::Batch);
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("short digest", |b| b.digest.truncate(31), "batch digest"),
        ("long digest", |b| b.digest.push(0), "batch digest"),
        ("no digest", |b| b.digest.clear(), "batch digest"),
        ("no signature", |b| b.signature.clear(), "batch signature"),
        (
            "huge signature",
            |b| b.signature = vec![1; 257],
            "batch signature",
        ),
    ];
    for (what, edit, field) in cases {
        let mut wire = pb::Batch::from(&batch());
        edit(&mut wire);
        assert_eq!(SignedBatch::try_from(wire).unwrap_err(), codec(field), "{what}");
    }
    // A wrong tx count or a digest of other requests is the core's to judge (it is
    // evidence for a complaint), not the codec's.
    let mut wire = pb::Batch::from(&batch());
    wire.tx_count = 9;
    wire.requests.pop();
    let b = SignedBatch::try_from(wire).unwrap();
    assert!(matches!(
        batcher::verify_batch(&common::config(2, 1), &b),
        Err(Error::TxCountMismatch { .. })
    ));
}

#[test]
fn malformed_bafs_and_complaints_are_refused_naming_the_field() {
    type EditBaf = fn(&mut pb::BatchAttestationFragment);
    let cases: Vec<(EditBaf, &str)> = vec![
        (|b| b.digest.truncate(1), "BAF digest"),
        (|b| b.signature.clear(), "BAF signature"),
        (|b| b.signature = vec![0; 300], "BAF signature"),
        (|b| b.primary_signature.clear(), "BAF primary signature"),
    ];
    for (edit, field) in cases {
        let mut wire = pb::BatchAttestationFragment::from(&baf());
        edit(&mut wire);
        assert_eq!(Baf::try_from(wire).unwrap_err(), codec(field));
    }
    type EditComplaint = fn(&mut pb::Complaint);
    let cases: Vec<(EditComplaint, &str)> = vec![
        (|c| c.reason = "lazy".into(), "complaint reason"),
        (|c| c.reason = "x".repeat(10_000), "complaint reason"),
        (|c| c.reason.clear(), "complaint reason"),
        (|c| c.signature = vec![0; 257], "complaint signature"),
        (|c| c.signature.clear(), "complaint signature"),
    ];
    for (edit, field) in cases {
        let mut wire = pb::Complaint::from(&complaint());
        edit(&mut wire);
        let e = Complaint::try_from(wire).unwrap_err();
        assert_eq!(e, codec(field));
        // An error never echoes what it refused.
        assert!(e.to_string().len() < 100);
    }
}

#[test]
fn malformed_consenter_requests_are_refused() {
    let empty = pb::ConsenterRequest { kind: None }.encode_to_vec();
    assert_eq!(
        decode_consenter_request(&empty).unwrap_err(),
        Error::MissingField {
            message: "ConsenterRequest",
            field: "kind"
        }
    );
    assert!(matches!(
        decode_consenter_request(&[0xff, 0xff, 0xff]).unwrap_err(),
        Error::Undecodable {
            message: "ConsenterRequest",
            ..
        }
    ));
    let mut bad = pb::BatchAttestationFragment::from(&baf());
    bad.digest.clear();
    let bytes = pb::ConsenterRequest {
        kind: Some(pb::consenter_request::Kind::Baf(bad)),
    }
    .encode_to_vec();
    assert_eq!(
        decode_consenter_request(&bytes).unwrap_err(),
        Error::Codec(codec("BAF digest"))
    );
    let mut bad = pb::Complaint::from(&complaint());
    bad.reason = "nope".into();
    let bytes = pb::ConsenterRequest {
        kind: Some(pb::consenter_request::Kind::Complaint(bad)),
    }
    .encode_to_vec();
    assert_eq!(
        decode_consenter_request(&bytes).unwrap_err(),
        Error::Codec(codec("complaint reason"))
    );
}

#[test]
fn the_batch_limit_takes_honest_batches_and_refuses_amplifying_ones() {
    let limit = wire::limits::BATCH;
    // An honest batch: 4,096 requests of 1 KiB.
    let requests: Vec<_> = (0..4096).map(|i| req(i, 1024)).collect();
    let honest = SignedBatch::sign(BatchId::new(0, 1, 1), 0, requests, &key(1));
    let bytes = pb::Batch::from(&honest).encode_to_vec();
    assert!(wire::budget::check(&bytes, limit.schema, limit.budget).is_ok());
    // One million empty requests: 2 MiB on the wire, far more decoded.
    let amplifying = pb::Batch {
        requests: vec![vec![]; 1 << 20],
        ..pb::Batch::from(&batch())
    }
    .encode_to_vec();
    assert!(amplifying.len() < limit.max_bytes);
    assert!(matches!(
        wire::budget::check(&amplifying, limit.schema, limit.budget),
        Err(wire::budget::BudgetError::OverBudget { .. })
    ));
}
