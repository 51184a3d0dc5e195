#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Table tests of the router's pure core: admission, in-flight bounds, backoff, config
//! validation and the codes a client sees.

mod common;

use arma::admission::ContentError;
use common::{Client, config, envelope_signed_by, signed};
use prost::Message;
use router::inflight::InFlight;
use router::{Admitted, Backoff, BatcherAnswer, BatcherRefusal, Error, Refusal, check_request};
use std::num::{NonZeroU64, NonZeroUsize};
use std::time::Duration;
use tonic::Code;
use types::Status;
use wire::pb;

fn admitted(bytes: &[u8], shards: u32) -> Result<Admitted, Refusal> {
    Ok(Admitted {
        shard: arma::content::shard_of(bytes, shards).unwrap(),
    })
}

#[test]
fn admission_table() {
    let alice = Client::new("alice");
    let mallory = Client::new("mallory");
    let open = config(4, &[]);
    let signed_cfg = config(4, &[&alice]);
    let good = signed(&alice, 1);
    let mut bad_id = envelope_signed_by(&alice, &alice.key, 2);
    bad_id.tx_id = String::new();
    let mut no_identity = envelope_signed_by(&alice, &alice.key, 3);
    no_identity.identity = None;
    let mut tampered = envelope_signed_by(&alice, &alice.key, 4);
    tampered.payload = common::payload(5);
    let mut unsupported = envelope_signed_by(&alice, &alice.key, 6);
    unsupported.payload_type = 9;
    let mut not_a_tx = envelope_signed_by(&alice, &alice.key, 7);
    not_a_tx.payload = vec![0xff; 8];
    let big = vec![0x0a; (1 << 20) + 1];
    type Case<'a> = (
        &'a str,
        Vec<u8>,
        &'a router::RouterConfig,
        Result<Admitted, Refusal>,
    );
    let cases: Vec<Case> = vec![
        ("empty", vec![], &open, Err(Refusal::Empty)),
        (
            "over 1 MiB",
            big,
            &open,
            Err(Refusal::TooLarge {
                size: (1 << 20) + 1,
                max: 1 << 20,
            }),
        ),
        (
            "garbage",
            vec![0xff, 0xff, 0xff],
            &open,
            Err(Refusal::Content(ContentError::Malformed {
                status: Status::MalformedBadEnvelope,
            })),
        ),
        (
            "missing tx id",
            bad_id.encode_to_vec(),
            &open,
            Err(Refusal::Content(ContentError::Malformed {
                status: Status::MalformedMissingTxId,
            })),
        ),
        (
            "unsupported payload",
            unsupported.encode_to_vec(),
            &open,
            Err(Refusal::Content(ContentError::Malformed {
                status: Status::MalformedUnsupportedEnvelopePayload,
            })),
        ),
        (
            "payload not a tx",
            not_a_tx.encode_to_vec(),
            &open,
            Err(Refusal::Content(ContentError::Malformed {
                status: Status::MalformedBadEnvelopePayload,
            })),
        ),
        (
            "open network, unsigned ok",
            good.clone(),
            &open,
            admitted(&good, 4),
        ),
        (
            "open network ignores the signature",
            tampered.encode_to_vec(),
            &open,
            admitted(&tampered.encode_to_vec(), 4),
        ),
        ("signed, good", good.clone(), &signed_cfg, admitted(&good, 4)),
        (
            "signed, tampered payload",
            tampered.encode_to_vec(),
            &signed_cfg,
            Err(Refusal::Content(ContentError::BadSignature)),
        ),
        (
            "signed, other key",
            envelope_signed_by(&alice, &mallory.key, 8).encode_to_vec(),
            &signed_cfg,
            Err(Refusal::Content(ContentError::BadSignature)),
        ),
        (
            "signed, unknown client",
            signed(&mallory, 9),
            &signed_cfg,
            Err(Refusal::Content(ContentError::UnknownClient)),
        ),
        (
            "signed, no identity",
            no_identity.encode_to_vec(),
            &signed_cfg,
            Err(Refusal::Content(ContentError::UnknownClient)),
        ),
    ];
    for (name, bytes, cfg, expected) in cases {
        assert_eq!(check_request(&bytes, cfg), expected, "{name}");
    }
}

#[test]
fn the_shard_is_the_batchers_shard_and_spreads() {
    let cfg = config(3, &[]);
    let mut seen = [0usize; 3];
    for n in 0..300 {
        let bytes = signed(&Client::new("bob"), n);
        let a = check_request(&bytes, &cfg).unwrap();
        // What the batcher core checks (`WrongShard`): the shard of the request's content
        // (its bytes without the client signature, ADR 0015).
        assert_eq!(a.shard, arma::content::shard_of(&bytes, 3).unwrap());
        let mut resigned = pb::Envelope::decode(bytes.as_slice()).unwrap();
        resigned.signature = vec![0x5a; 64];
        assert_eq!(
            check_request(&resigned.encode_to_vec(), &cfg).map(|r| r.shard),
            Ok(a.shard)
        );
        seen[a.shard as usize] += 1;
    }
    assert!(seen.iter().all(|&c| c > 50), "{seen:?}");
}

#[test]
fn refusal_codes() {
    let cases = [
        (Refusal::Empty, Code::InvalidArgument),
        (Refusal::TooLarge { size: 2, max: 1 }, Code::InvalidArgument),
        (
            Refusal::Content(ContentError::Malformed {
                status: Status::MalformedBadEnvelope,
            }),
            Code::InvalidArgument,
        ),
        (
            Refusal::Content(ContentError::BadSignature),
            Code::InvalidArgument,
        ),
        (
            Refusal::Content(ContentError::UnknownClient),
            Code::PermissionDenied,
        ),
    ];
    for (refusal, code) in cases {
        assert_eq!(refusal.code(), code, "{refusal}");
        assert_eq!(Error::from(refusal.clone()).code(), code, "{refusal}");
    }
}

#[test]
fn error_and_batcher_refusal_codes() {
    let cases = [
        (
            Error::BatcherRefused {
                reason: BatcherRefusal::Duplicate,
            },
            Code::AlreadyExists,
        ),
        (
            Error::BatcherRefused {
                reason: BatcherRefusal::MempoolFullRequests,
            },
            Code::ResourceExhausted,
        ),
        (
            Error::BatcherRefused {
                reason: BatcherRefusal::MempoolFullBytes,
            },
            Code::ResourceExhausted,
        ),
        (
            Error::BatcherRefused {
                reason: BatcherRefusal::TooLarge,
            },
            Code::InvalidArgument,
        ),
        (
            Error::BatcherRefused {
                reason: BatcherRefusal::WrongShard,
            },
            Code::FailedPrecondition,
        ),
        (
            Error::BatcherRefused {
                reason: BatcherRefusal::Unspecified,
            },
            Code::Unknown,
        ),
        (
            Error::ShardFullRequests {
                shard: 0,
                held: 1,
                max: 1,
            },
            Code::ResourceExhausted,
        ),
        (
            Error::ShardFullBytes {
                shard: 0,
                held: 1,
                size: 1,
                max: 1,
            },
            Code::ResourceExhausted,
        ),
        (Error::LinkBusy { shard: 0, max: 1 }, Code::ResourceExhausted),
        (
            Error::LinkDown {
                shard: 0,
                reason: "x".into(),
            },
            Code::Unavailable,
        ),
        (
            Error::NoAnswer {
                shard: 0,
                timeout_ms: 1,
            },
            Code::DeadlineExceeded,
        ),
    ];
    for (error, code) in cases {
        assert_eq!(error.code(), code, "{error}");
    }
}

#[test]
fn batcher_answers_round_trip_the_wire() {
    let answers = [
        BatcherAnswer::Admitted,
        BatcherAnswer::Refused(BatcherRefusal::Duplicate),
        BatcherAnswer::Refused(BatcherRefusal::MempoolFullRequests),
        BatcherAnswer::Refused(BatcherRefusal::MempoolFullBytes),
        BatcherAnswer::Refused(BatcherRefusal::TooLarge),
        BatcherAnswer::Refused(BatcherRefusal::WrongShard),
        BatcherAnswer::Refused(BatcherRefusal::Unspecified),
    ];
    for a in answers {
        let w = a.to_wire(7);
        assert_eq!(w.id, 7);
        assert_eq!(BatcherAnswer::from_wire(&w), a);
    }
    // A refusal number this router does not know is `Unspecified`, never an admission.
    let unknown = pb::IntakeResponse {
        id: 1,
        admitted: false,
        refusal: 99,
    };
    assert_eq!(
        BatcherAnswer::from_wire(&unknown),
        BatcherAnswer::Refused(BatcherRefusal::Unspecified)
    );
}

#[derive(Debug)]
enum Op {
    Admit(u32, u64),
    Release(u32, u64),
}

#[test]
fn in_flight_table() {
    // Two shards, at most 2 requests and 100 bytes each.
    let full_req = |held| {
        Err(Error::ShardFullRequests {
            shard: 0,
            held,
            max: 2,
        })
    };
    /// An operation, its result, and shard 0's load after it.
    type Step = (Op, Result<(), Error>, (usize, u64));
    let steps: Vec<Step> = vec![
        (Op::Admit(0, 60), Ok(()), (1, 60)),
        (
            Op::Admit(0, 41),
            Err(Error::ShardFullBytes {
                shard: 0,
                held: 60,
                size: 41,
                max: 100,
            }),
            (1, 60),
        ),
        (Op::Admit(0, 40), Ok(()), (2, 100)),
        (Op::Admit(0, 0), full_req(2), (2, 100)),
        (Op::Release(0, 60), Ok(()), (1, 40)),
        (Op::Admit(0, 60), Ok(()), (2, 100)),
        (Op::Release(0, 60), Ok(()), (1, 40)),
        (Op::Release(0, 40), Ok(()), (0, 0)),
        // Releasing more than held never underflows.
        (Op::Release(0, 40), Ok(()), (0, 0)),
        (
            Op::Admit(0, u64::MAX),
            Err(Error::ShardFullBytes {
                shard: 0,
                held: 0,
                size: u64::MAX,
                max: 100,
            }),
            (0, 0),
        ),
        (
            Op::Admit(2, 1),
            Err(Error::UnknownShard { shard: 2, shards: 2 }),
            (0, 0),
        ),
    ];
    let mut f = InFlight::new(2, 2, 100);
    f.try_admit(1, 100).unwrap();
    for (i, (op, expected, load)) in steps.into_iter().enumerate() {
        let got = match op {
            Op::Admit(s, b) => f.try_admit(s, b),
            Op::Release(s, b) => {
                f.release(s, b);
                Ok(())
            }
        };
        assert_eq!(got, expected, "step {i}");
        assert_eq!(f.load(0), load, "step {i}");
        // The other shard is independent.
        assert_eq!(f.load(1), (1, 100), "step {i}");
    }
}

#[test]
fn backoff_table() {
    let b = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_secs(5),
    };
    let ms = Duration::from_millis;
    let cases = [
        (0, ms(50)),
        (1, ms(100)),
        (2, ms(200)),
        (6, ms(3200)),
        (7, ms(5000)),
        (31, ms(5000)),
        (32, ms(5000)),
        (u32::MAX, ms(5000)),
    ];
    for (attempt, delay) in cases {
        assert_eq!(b.delay(attempt), delay, "attempt {attempt}");
    }
    // Reset on success is the shell calling delay(0) again.
    assert_eq!(b.delay(0), ms(50));
    let huge = Backoff {
        initial: Duration::MAX,
        max: Duration::MAX,
    };
    assert_eq!(huge.delay(3), Duration::MAX);
}

#[test]
fn config_validation_table() {
    let ok = config(2, &[]);
    assert_eq!(ok.validate(), Ok(()));
    assert_eq!(ok.max_request_bytes.get(), 1 << 20);
    type Edit = fn(&mut router::RouterConfig);
    let cases: [(&str, Edit); 5] = [
        ("max_request_bytes", |c| {
            c.max_request_bytes = NonZeroUsize::new(wire::limits::ROUTER_MAX_ENVELOPE_BYTES + 1).unwrap()
        }),
        ("shard_max_in_flight_bytes", |c| {
            c.shard_max_in_flight_bytes = NonZeroU64::new(1000).unwrap()
        }),
        ("answer_timeout", |c| c.answer_timeout = Duration::ZERO),
        ("backoff.initial", |c| c.backoff.initial = Duration::ZERO),
        ("backoff.max", |c| c.backoff.max = Duration::from_millis(1)),
    ];
    for (field, edit) in cases {
        let mut c = ok.clone();
        edit(&mut c);
        match c.validate() {
            Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}
