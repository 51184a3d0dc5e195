#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Transition tables of the batcher core: one table per input kind, values compared.

mod common;

use std::sync::Arc;

use batcher::{
    Baf, Batcher, Complaint, ComplaintReason, Error, Input, Output, RefuseReason, RequestDigest, SignedBatch,
    TermInfo,
};
use common::{N, Step, batcher, config, key, req, run, step};
use types::BatchId;
use types::digest::shard_of;

fn admitted(r: &batcher::Request) -> Output {
    Output::Admitted {
        digest: RequestDigest::of(r),
    }
}

fn refused(r: &batcher::Request, reason: RefuseReason) -> Output {
    Output::Refused {
        digest: RequestDigest::of(r),
        reason,
    }
}

fn signed(seq: u64, primary: u32, requests: Vec<batcher::Request>) -> Arc<SignedBatch> {
    signed_in(0, seq, primary, requests)
}

fn signed_in(term: u64, seq: u64, primary: u32, requests: Vec<batcher::Request>) -> Arc<SignedBatch> {
    Arc::new(SignedBatch::sign(
        BatchId::new(0, primary, seq),
        term,
        requests,
        &key(primary),
    ))
}

fn persisted(b: &SignedBatch) -> Input {
    Input::Persisted {
        id: b.id(),
        digest: b.header.digest,
    }
}

fn baf(b: &SignedBatch, signer: u32) -> Baf {
    Baf::sign(b, signer, &key(signer))
}

fn pull(primary: u32, seq: u64) -> Output {
    Output::Pull(BatchId::new(0, primary, seq))
}

#[test]
fn requests_are_admitted_deduplicated_and_bounded() {
    // Party 2 is a secondary in term 0: it pulls from party 1 and never cuts.
    let mut b = batcher(2);
    let r: Vec<_> = (0..8).map(|i| req(i, 60)).collect();
    let big = req(100, 101);
    let mut steps = vec![step(
        Input::Request(r[0].clone()),
        vec![admitted(&r[0]), pull(1, 1)],
    )];
    steps.push(step(
        Input::Request(r[0].clone()),
        vec![refused(&r[0], RefuseReason::Duplicate)],
    ));
    steps.push(step(
        Input::Request(big.clone()),
        vec![refused(&big, RefuseReason::TooLarge)],
    ));
    for x in &r[1..6] {
        steps.push(step(Input::Request(x.clone()), vec![admitted(x)]));
    }
    // Six requests held: the count bound refuses the seventh.
    steps.push(step(
        Input::Request(r[6].clone()),
        vec![refused(&r[6], RefuseReason::MempoolFullRequests)],
    ));
    run(&mut b, steps);
    assert_eq!(b.pending(), (6, 360));

    // The byte bound: 500 bytes; 4 × 100 + 100 fits, one more byte does not.
    let mut b = batcher(2);
    let _ = b.handle(Input::Tick(0));
    let mut steps = Vec::new();
    for i in 0..5 {
        let x = req(i, 100);
        steps.push(step(Input::Request(x.clone()), vec![admitted(&x)]));
    }
    let x = req(9, 4);
    steps.push(step(
        Input::Request(x.clone()),
        vec![refused(&x, RefuseReason::MempoolFullBytes)],
    ));
    run(&mut b, steps);
    assert_eq!(b.pending(), (5, 500));
}

#[test]
fn requests_of_another_shard_are_refused() {
    let cfg = config(2, 2);
    let mut b = Batcher::new(
        cfg,
        key(2),
        TermInfo {
            term: 0,
            last_ordered_seq: 0,
        },
    )
    .unwrap();
    let other = (0..)
        .map(|i| req(i, 8))
        .find(|r| shard_of(r, 2).unwrap() == 1)
        .unwrap();
    let mine = (0..)
        .map(|i| req(i, 8))
        .find(|r| shard_of(r, 2).unwrap() == 0)
        .unwrap();
    run(
        &mut b,
        vec![
            step(
                Input::Request(other.clone()),
                vec![refused(&other, RefuseReason::WrongShard), pull(1, 1)],
            ),
            step(Input::Request(mine.clone()), vec![admitted(&mine)]),
        ],
    );
}

#[test]
fn primary_cuts_at_count_bytes_and_timeout_and_attests_only_after_persisted() {
    let mut b = batcher(1);
    let r: Vec<_> = (0..6).map(|i| req(i, 90)).collect();
    let b1 = signed(1, 1, r[0..2].to_vec()); // 180 bytes: a third would pass 250
    let b2 = signed(2, 1, r[2..3].to_vec()); // cut by timeout
    run(
        &mut b,
        vec![
            step(Input::Tick(10), vec![]),
            step(Input::Request(r[0].clone()), vec![admitted(&r[0])]),
            step(Input::Request(r[1].clone()), vec![admitted(&r[1])]),
            // 270 bytes pending ≥ 250: a batch of what fits (two requests).
            step(
                Input::Request(r[2].clone()),
                vec![admitted(&r[2]), Output::Persist(b1.clone())],
            ),
            step(Input::Tick(59), vec![]),
            step(Input::Tick(60), vec![Output::Persist(b2.clone())]),
            // A wrong digest does not count as persisted.
            step(
                Input::Persisted {
                    id: b1.id(),
                    digest: [7; 32],
                },
                vec![],
            ),
            step(
                persisted(&b1),
                vec![Output::Serve(b1.clone()), Output::SendBaf(baf(&b1, 1))],
            ),
            // Persisted twice: nothing more.
            step(persisted(&b1), vec![]),
        ],
    );
    assert_eq!(b.unconfirmed_batches(), 2);
    assert_eq!(b.pending(), (0, 0));
    assert_eq!(b.in_flight(), (3, 270));
    // Count bound: three small requests make a full batch at once.
    let mut b = batcher(1);
    let s: Vec<_> = (10..13).map(|i| req(i, 4)).collect();
    let full = signed(1, 1, s.clone());
    run(
        &mut b,
        vec![
            step(Input::Request(s[0].clone()), vec![admitted(&s[0])]),
            step(Input::Request(s[1].clone()), vec![admitted(&s[1])]),
            step(
                Input::Request(s[2].clone()),
                vec![admitted(&s[2]), Output::Persist(full)],
            ),
        ],
    );
}

#[test]
fn primary_window_waits_for_f_plus_one_acks() {
    // Room for nine requests: the mempool bound counts the unordered batches too.
    let mut cfg = config(1, 1);
    cfg.mempool_max_requests = std::num::NonZeroUsize::new(9).unwrap();
    let mut b = Batcher::new(
        cfg,
        key(1),
        TermInfo {
            term: 0,
            last_ordered_seq: 0,
        },
    )
    .unwrap();
    let r: Vec<_> = (0..9).map(|i| req(i, 4)).collect();
    let b1 = signed(1, 1, r[0..3].to_vec());
    let b2 = signed(2, 1, r[3..6].to_vec());
    let b3 = signed(3, 1, r[6..9].to_vec());
    let mut forged = baf(&b1, 2);
    forged.signer = 3; // party 2's signature claimed by party 3
    let mut steps: Vec<Step> = Vec::new();
    for (i, x) in r.iter().enumerate() {
        let mut expect = vec![admitted(x)];
        if i == 2 {
            expect.push(Output::Persist(b1.clone()));
        }
        if i == 5 {
            expect.push(Output::Persist(b2.clone()));
        }
        steps.push(step(Input::Request(x.clone()), expect));
    }
    steps.extend([
        // Window 2 is full: the third full batch waits.
        step(Input::Tick(1000), vec![]),
        // An ack before the primary's own Persisted: counted, but f+1 = 2 needs the primary too.
        step(Input::Baf(baf(&b1, 2)), vec![]),
        step(Input::Baf(forged), vec![]),
        step(Input::Baf(baf(&b2, 1)), vec![]), // its own signature from outside: ignored
        step(
            persisted(&b1),
            vec![
                Output::Serve(b1.clone()),
                Output::SendBaf(baf(&b1, 1)),
                Output::Persist(b3.clone()),
            ],
        ),
    ]);
    run(&mut b, steps);
    assert_eq!(b.unconfirmed_batches(), 2);
}

#[test]
fn secondary_pulls_verifies_persists_then_attests_and_acks() {
    let mut b = batcher(2);
    let r: Vec<_> = (0..3).map(|i| req(i, 20)).collect();
    let b1 = signed(1, 1, r.clone());
    let b2 = signed(2, 1, vec![req(50, 20)]);
    run(
        &mut b,
        vec![
            step(Input::Tick(0), vec![pull(1, 1)]),
            step(Input::Request(r[0].clone()), vec![admitted(&r[0])]),
            // Seq 2 before seq 1, or from a party that is not the primary: ignored.
            step(
                Input::Batch {
                    from: 1,
                    batch: (*b2).clone(),
                },
                vec![],
            ),
            step(
                Input::Batch {
                    from: 3,
                    batch: (*b1).clone(),
                },
                vec![],
            ),
            // The primary's seq 1, but cut in another term (a reused seq): ignored.
            step(
                Input::Batch {
                    from: 1,
                    batch: (*signed_in(3, 1, 1, r.clone())).clone(),
                },
                vec![],
            ),
            step(
                Input::Batch {
                    from: 1,
                    batch: (*b1).clone(),
                },
                vec![Output::Persist(b1.clone()), pull(1, 2)],
            ),
            step(
                Input::Batch {
                    from: 1,
                    batch: (*b1).clone(),
                },
                vec![],
            ),
            step(
                persisted(&b1),
                vec![
                    Output::Serve(b1.clone()),
                    Output::SendBaf(baf(&b1, 2)),
                    Output::AckPrimary {
                        to: 1,
                        baf: baf(&b1, 2),
                    },
                ],
            ),
        ],
    );
    // The request left the pending queue and stays known until ordered.
    assert_eq!(b.pending(), (0, 0));
    assert!(b.knows(&RequestDigest::of(&r[0])));
    run(
        &mut b,
        vec![
            step(
                Input::Request(r[1].clone()),
                vec![refused(&r[1], RefuseReason::Duplicate)],
            ),
            step(
                Input::Ordered {
                    id: b1.id(),
                    requests: b1.requests.clone(),
                },
                vec![],
            ),
            step(
                Input::Request(r[1].clone()),
                vec![refused(&r[1], RefuseReason::Duplicate)],
            ),
        ],
    );
    assert_eq!(b.in_flight(), (0, 0));
}

fn complaint(signer: u32, term: u64, reason: ComplaintReason) -> Output {
    Output::Complain(Complaint::sign(0, term, signer, reason, &key(signer)))
}

#[test]
fn bogus_batches_are_rejected_with_one_complaint_per_term() {
    let good = signed(1, 1, vec![req(1, 10), req(2, 10)]);
    let mut bad_digest = (*good).clone();
    bad_digest.requests[1] = req(3, 10);
    let mut bad_signature = (*good).clone();
    bad_signature.signature = signed(1, 2, good.requests.clone()).signature.clone();
    let mut bad_count = (*good).clone();
    bad_count.header.tx_count = 3;
    let dup = signed(1, 1, vec![req(1, 10), req(1, 10)]);
    let too_big = signed(1, 1, vec![req(1, 101)]);
    let empty = signed(1, 1, vec![]);
    let other_shard = Arc::new(SignedBatch::sign(
        BatchId::new(1, 1, 1),
        0,
        vec![req(1, 10)],
        &key(1),
    ));
    let id = good.id();
    let cases: Vec<(SignedBatch, Error)> = vec![
        (bad_digest, Error::DigestMismatch { id }),
        (bad_signature, Error::BadBatchSignature { id }),
        (
            bad_count,
            Error::TxCountMismatch {
                id,
                claimed: 3,
                count: 2,
            },
        ),
        ((*dup).clone(), Error::DuplicateRequestInBatch { id, index: 1 }),
        (
            (*too_big).clone(),
            Error::RequestTooLarge {
                id,
                index: 0,
                bytes: 101,
                max: 100,
            },
        ),
        ((*empty).clone(), Error::EmptyBatch { id }),
        (
            (*other_shard).clone(),
            Error::BatchOfAnotherShard {
                id: other_shard.id(),
                expected: 0,
            },
        ),
    ];
    for (batch, error) in cases {
        let mut b = batcher(3);
        let _ = b.handle(Input::Tick(0));
        run(
            &mut b,
            vec![
                step(
                    Input::Batch {
                        from: 1,
                        batch: batch.clone(),
                    },
                    vec![
                        Output::BatchRejected {
                            from: 1,
                            error: error.clone(),
                        },
                        complaint(3, 0, ComplaintReason::BogusBatch),
                    ],
                ),
                // A second bogus batch: rejected, no second complaint in the term.
                step(
                    Input::Batch { from: 1, batch },
                    vec![Output::BatchRejected { from: 1, error }],
                ),
                // The good batch is still accepted.
                step(
                    Input::Batch {
                        from: 1,
                        batch: (*good).clone(),
                    },
                    vec![Output::Persist(good.clone()), pull(1, 2)],
                ),
            ],
        );
    }
}

#[test]
fn a_request_of_another_shard_in_a_batch_is_bogus() {
    let cfg = config(2, 2);
    let mut b = Batcher::new(
        cfg,
        key(2),
        TermInfo {
            term: 0,
            last_ordered_seq: 0,
        },
    )
    .unwrap();
    let other = (0..)
        .map(|i| req(i, 8))
        .find(|r| shard_of(r, 2).unwrap() == 1)
        .unwrap();
    let batch = signed(1, 1, vec![other]);
    run(
        &mut b,
        vec![
            step(Input::Tick(0), vec![pull(1, 1)]),
            step(
                Input::Batch {
                    from: 1,
                    batch: (*batch).clone(),
                },
                vec![
                    Output::BatchRejected {
                        from: 1,
                        error: Error::RequestOfAnotherShard {
                            id: batch.id(),
                            index: 0,
                            shard: 1,
                        },
                    },
                    complaint(2, 0, ComplaintReason::BogusBatch),
                ],
            ),
        ],
    );
}

#[test]
fn censorship_forwards_each_round_and_complains_once_per_term() {
    let mut b = batcher(2);
    let r0 = req(0, 10);
    let r1 = req(1, 10);
    let fwd = |r: &batcher::Request| Output::ForwardToPrimary {
        to: 1,
        request: r.clone(),
    };
    run(
        &mut b,
        vec![
            step(Input::Tick(0), vec![pull(1, 1)]),
            step(Input::Request(r0.clone()), vec![admitted(&r0)]),
            step(Input::Tick(50), vec![]),
            step(Input::Request(r1.clone()), vec![admitted(&r1)]),
            step(Input::Tick(99), vec![]),
            step(Input::Tick(100), vec![fwd(&r0)]),
            step(Input::Tick(149), vec![]),
            step(Input::Tick(150), vec![fwd(&r1)]),
            step(Input::Tick(199), vec![]),
            // A new forwarding round every 100 ms: a full primary may have dropped them.
            step(Input::Tick(200), vec![fwd(&r0), fwd(&r1)]),
            step(Input::Tick(299), vec![]),
            step(
                Input::Tick(300),
                vec![fwd(&r0), fwd(&r1), complaint(2, 0, ComplaintReason::Censorship)],
            ),
            step(Input::Tick(350), vec![]),
            step(Input::Tick(400), vec![fwd(&r0), fwd(&r1)]),
            // Time never goes back.
            step(Input::Tick(5), vec![]),
        ],
    );
    // The primary neither forwards nor complains; it cuts.
    let mut p = batcher(1);
    let _ = p.handle(Input::Request(r0.clone()));
    let out = p.handle(Input::Tick(10_000));
    assert_eq!(out, vec![Output::Persist(signed(1, 1, vec![r0]))]);
}

#[test]
fn a_term_change_hands_pending_and_unordered_requests_to_the_new_primary() {
    // Party 2 is a secondary in term 0 and the primary of term 1.
    let mut b = batcher(2);
    let r: Vec<_> = (0..4).map(|i| req(i, 10)).collect();
    let b1 = signed(1, 1, r[0..2].to_vec());
    let b2 = signed(2, 1, r[2..3].to_vec());
    let _ = b.handle(Input::Tick(0));
    for x in &r {
        let _ = b.handle(Input::Request(x.clone()));
    }
    for batch in [&b1, &b2] {
        let _ = b.handle(Input::Batch {
            from: 1,
            batch: (**batch).clone(),
        });
        let _ = b.handle(persisted(batch));
    }
    assert_eq!(b.pending(), (1, 10));
    // b1 was ordered, b2 was not; the term moves on after seq 1.
    let _ = b.handle(Input::Ordered {
        id: b1.id(),
        requests: b1.requests.clone(),
    });
    // What the shell records as ordered: b1's request digests, in order, once.
    let want: Vec<_> = b1.requests.iter().map(|r| RequestDigest::of(r)).collect();
    assert_eq!(b.take_newly_ordered(), want);
    assert!(b.take_newly_ordered().is_empty());
    let cut = signed_in(1, 2, 2, vec![r[2].clone(), r[3].clone()]);
    run(
        &mut b,
        vec![
            step(
                Input::TermChanged(TermInfo {
                    term: 1,
                    last_ordered_seq: 1,
                }),
                vec![],
            ),
            // The new primary cuts b2's request first, then the pending one, at seq 2.
            step(Input::Tick(50), vec![Output::Persist(cut.clone())]),
            // A stale term change is ignored; a late batch from the old primary too.
            step(
                Input::TermChanged(TermInfo {
                    term: 1,
                    last_ordered_seq: 0,
                }),
                vec![],
            ),
            step(
                Input::Batch {
                    from: 1,
                    batch: (*signed(3, 1, vec![req(9, 10)])).clone(),
                },
                vec![],
            ),
            // An ack of the old primary's batch means nothing to the new one.
            step(Input::Baf(baf(&b2, 3)), vec![]),
        ],
    );
    assert!(b.is_primary());
    assert_eq!((b.term(), b.primary(), b.next_seq()), (1, 2, Some(3)));
    // Ordered requests stay refused.
    run(
        &mut b,
        vec![step(
            Input::Request(r[0].clone()),
            vec![refused(&r[0], RefuseReason::Duplicate)],
        )],
    );
}

#[test]
fn the_old_primary_stops_cutting_and_pulls_from_the_new_one() {
    let mut b = batcher(1);
    let r: Vec<_> = (0..2).map(|i| req(i, 10)).collect();
    let b1 = signed(1, 1, r.clone());
    let _ = b.handle(Input::Request(r[0].clone()));
    let _ = b.handle(Input::Request(r[1].clone()));
    assert_eq!(b.handle(Input::Tick(50)), vec![Output::Persist(b1.clone())]);
    run(
        &mut b,
        vec![
            step(
                Input::TermChanged(TermInfo {
                    term: 1,
                    last_ordered_seq: 0,
                }),
                vec![pull(2, 1)],
            ),
            // The fsync of the abandoned batch completes: no BAF for it any more.
            step(persisted(&b1), vec![]),
            step(
                Input::Tick(10_000),
                vec![
                    Output::ForwardToPrimary {
                        to: 2,
                        request: r[0].clone(),
                    },
                    Output::ForwardToPrimary {
                        to: 2,
                        request: r[1].clone(),
                    },
                    complaint(1, 1, ComplaintReason::Censorship),
                ],
            ),
        ],
    );
    assert!(!b.is_primary());
    assert_eq!(b.pending(), (2, 20));
}

#[test]
fn forwarded_requests_reach_only_a_primary() {
    let r = req(1, 10);
    let mut p = batcher(1);
    let mut s = batcher(2);
    assert_eq!(
        p.handle(Input::Forwarded {
            from: 2,
            request: r.clone()
        }),
        vec![]
    );
    assert_eq!(p.pending(), (1, 10));
    assert_eq!(
        p.handle(Input::Forwarded {
            from: 9,
            request: req(2, 10)
        }),
        vec![]
    );
    assert_eq!(p.pending(), (1, 10));
    let _ = s.handle(Input::Forwarded { from: 3, request: r });
    assert_eq!(s.pending(), (0, 0));
}

/// A Byzantine peer flooding forwards holds at most its share of the primary's mempool
/// (`mempool_max_requests / parties`): the router's requests and the other parties'
/// forwards still get in.
#[test]
fn a_forwarder_holds_at_most_its_share_of_the_mempool() {
    let mut p = batcher(1);
    // A mempool of 6 among 4 parties: one pending forward per party.
    let forward = |b: &mut Batcher, from: u32, i: u32| {
        let out = b.handle(Input::Forwarded {
            from,
            request: req(i, 10),
        });
        assert_eq!(out, vec![]);
        b.pending().0
    };
    assert_eq!(forward(&mut p, 2, 1), 1);
    assert_eq!(
        forward(&mut p, 2, 2),
        1,
        "party 2's second forward is over its share"
    );
    assert_eq!(forward(&mut p, 2, 3), 1);
    assert_eq!(forward(&mut p, 3, 4), 2, "party 3 still has its share");
    // The router's request is admitted, and the batch it completes holds party 2's one
    // forward, party 3's and the router's: nothing of party 2's flood.
    let own = req(5, 10);
    let out = p.handle(Input::Request(own.clone()));
    assert_eq!(out.first(), Some(&admitted(&own)));
    let cut: Vec<&batcher::Request> = out
        .iter()
        .find_map(|o| match o {
            Output::Persist(b) => Some(b.requests.iter().collect()),
            _ => None,
        })
        .expect("three requests make a batch");
    assert_eq!(cut, vec![&req(1, 10), &req(4, 10), &own]);
}

/// A pulled batch with a request whose content the shell refused (not an envelope, a
/// bad client signature) is bogus when the primary served it as its next batch: rejected
/// with a complaint, once per term; from anyone else it is ignored.
#[test]
fn a_batch_with_a_refused_request_is_bogus() {
    let batch = signed(1, 1, vec![req(1, 10), req(2, 10)]);
    let id = batch.id();
    let refused = |from: u32| Input::RefusedBatch {
        from,
        batch: (*batch).clone(),
        index: 1,
        reason: "malformed envelope".into(),
    };
    let mut s = batcher(3);
    let _ = s.handle(Input::Tick(0));
    run(
        &mut s,
        vec![
            // Not from the primary: ignored.
            step(refused(2), vec![]),
            step(
                refused(1),
                vec![
                    Output::BatchRejected {
                        from: 1,
                        error: Error::RefusedRequest {
                            id,
                            index: 1,
                            reason: "malformed envelope".into(),
                        },
                    },
                    complaint(3, 0, ComplaintReason::BogusBatch),
                ],
            ),
        ],
    );
    // The primary itself never rejects its own batch.
    let mut p = batcher(1);
    assert_eq!(p.handle(refused(1)), vec![]);
}

/// A request's dedup key and shard leave its client signature out (ADR 0015): the same
/// envelope signed again (an ECDSA signature differs each time, and anyone can swap it)
/// is a duplicate, not a second request to order.
#[test]
fn a_request_signed_again_is_a_duplicate() {
    // An envelope: payload (field 1), then the signature (field 2).
    let envelope = |signature: u8| -> batcher::Request {
        let mut bytes = vec![0x0a, 4, b't', b'x', b'-', b'1', 0x12, 3];
        bytes.extend([signature; 3]);
        Arc::from(bytes)
    };
    let (first, again) = (envelope(1), envelope(2));
    assert_eq!(RequestDigest::of(&first), RequestDigest::of(&again));
    let mut p = batcher(1);
    assert_eq!(p.handle(Input::Request(first.clone())), vec![admitted(&first)]);
    assert_eq!(
        p.handle(Input::Request(again.clone())),
        vec![refused(&again, RefuseReason::Duplicate)]
    );
}

/// A Byzantine primary that batches a request again — one already ordered, or one held
/// in another batch of the term — would have it ordered twice: a secondary rejects the
/// batch as bogus and complains.
#[test]
fn a_batch_repeating_an_ordered_or_batched_request_is_bogus() {
    let r = req(1, 10);
    let first = signed(1, 1, vec![r.clone(), req(2, 10)]);
    let repeat = signed(2, 1, vec![req(3, 10), r.clone()]);
    // Ordered already.
    let mut s = batcher(3);
    let _ = s.handle(Input::Tick(0));
    let _ = s.handle(Input::Batch {
        from: 1,
        batch: (*first).clone(),
    });
    let _ = s.handle(persisted(&first));
    let _ = s.handle(Input::Ordered {
        id: first.id(),
        requests: first.requests.clone(),
    });
    let out = s.handle(Input::Batch {
        from: 1,
        batch: (*repeat).clone(),
    });
    assert_eq!(
        out,
        vec![
            Output::BatchRejected {
                from: 1,
                error: Error::RequestNotNew {
                    id: repeat.id(),
                    index: 1
                },
            },
            complaint(3, 0, ComplaintReason::BogusBatch),
        ]
    );
    // In another unordered batch of the term.
    let mut s = batcher(3);
    let _ = s.handle(Input::Tick(0));
    let _ = s.handle(Input::Batch {
        from: 1,
        batch: (*first).clone(),
    });
    let out = s.handle(Input::Batch {
        from: 1,
        batch: (*repeat).clone(),
    });
    assert!(
        matches!(
            out.first(),
            Some(Output::BatchRejected {
                error: Error::RequestNotNew { index: 1, .. },
                ..
            })
        ),
        "{out:?}"
    );
}

#[test]
fn configs_are_validated() {
    let mut c = config(1, 1);
    c.party = N + 1;
    assert_eq!(
        c.validate(),
        Err(Error::PartyOutOfRange {
            party: N + 1,
            parties: arma::Parties::contiguous(N)
        })
    );
    let mut c = config(1, 1);
    c.keys.remove(&3);
    assert_eq!(c.validate(), Err(Error::MissingKey { party: 3 }));
    let mut c = config(1, 1);
    c.complain_timeout_ms = 10;
    assert!(matches!(
        c.validate(),
        Err(Error::LimitTooSmall {
            field: "complain_timeout_ms",
            ..
        })
    ));
    let mut c = config(1, 1);
    c.max_batch_bytes = std::num::NonZeroU64::new(99).unwrap();
    assert!(matches!(
        c.validate(),
        Err(Error::LimitTooSmall {
            field: "max_batch_bytes",
            ..
        })
    ));
    let err = Batcher::new(
        config(1, 1),
        key(2),
        TermInfo {
            term: 0,
            last_ordered_seq: 0,
        },
    )
    .err();
    assert_eq!(err, Some(Error::SigningKeyMismatch { party: 1 }));
    let four = arma::Parties::contiguous(4);
    assert_eq!(batcher::primary_of(0, 0, &four), 1);
    assert_eq!(batcher::primary_of(3, 2, &four), 2);
    assert_eq!(batcher::primary_of(1, u64::MAX, &four), 1);
}

#[test]
fn signed_bytes_are_stable_and_separated() {
    let b = signed(7, 2, vec![req(1, 10)]);
    let header = b.header.signed_bytes();
    let baf_bytes = b.header.baf_bytes();
    assert!(header.starts_with(b"fabrx/batcher/v1/batch-header"));
    assert!(baf_bytes.starts_with(b"fabrx/batcher/v1/baf"));
    let b = signed_in(3, 7, 2, vec![req(1, 10)]);
    let header = b.header.signed_bytes();
    assert_eq!(header.len(), b"fabrx/batcher/v1/batch-header".len() + 60);
    // u32 shard ‖ u64 term ‖ u32 primary ‖ u64 seq, then the digest and the tx count.
    assert_eq!(
        &header[header.len() - 60..header.len() - 36],
        &[
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 7
        ]
    );
    // A batch header signature is not a BAF, and a BAF of party 2 does not verify as party 3's.
    let as_baf = Baf {
        header: b.header,
        signer: 2,
        config: 0,
        signature: b.signature.clone(),
        primary_signature: b.signature.clone(),
    };
    assert!(as_baf.primary_verifies(&key(2).public_key()));
    assert!(!as_baf.verifies(&key(2).public_key()));
    assert!(baf(&b, 2).verifies(&key(2).public_key()));
    assert!(!baf(&b, 2).verifies(&key(3).public_key()));
    let c = Complaint::sign(0, 5, 3, ComplaintReason::Censorship, &key(3));
    assert!(c.verifies(&key(3).public_key()));
    // The batcher's tags joined the workspace's list, and none prefixes another tag.
    let all = types::tags::all();
    assert!(all.contains(&types::tags::batcher::BAF));
    for (i, a) in all.iter().enumerate() {
        for (j, b) in all.iter().enumerate() {
            assert!(i == j || !b.starts_with(a), "{a:?} prefixes {b:?}");
        }
    }
    let mut other_term = c.clone();
    other_term.term = 6;
    assert!(!other_term.verifies(&key(3).public_key()));
    // The config sequence is signed: a BAF or complaint relabelled to another config
    // does not verify; one signed under it does, and ends with it (u64, big-endian).
    let mut relabelled = baf(&b, 2);
    relabelled.config = 1;
    assert!(!relabelled.verifies(&key(2).public_key()));
    let at_one = Baf::sign_at(1, &b, 2, &key(2));
    assert!(at_one.verifies(&key(2).public_key()));
    assert!(Baf::signed_bytes(&b.header, 1).ends_with(&[0, 0, 0, 0, 0, 0, 0, 1]));
    let mut moved = c.clone();
    moved.config = 2;
    assert!(!moved.verifies(&key(3).public_key()));
    assert!(
        Complaint::sign_at(2, 0, 5, 3, ComplaintReason::Censorship, &key(3)).verifies(&key(3).public_key())
    );
}

#[test]
fn ordered_batches_drop_their_requests_even_unseen_and_a_lagging_secondary_skips_them() {
    let mut b = batcher(3);
    let r: Vec<_> = (0..3).map(|i| req(i, 10)).collect();
    let b1 = signed(1, 1, r[0..2].to_vec());
    let _ = b.handle(Input::Tick(0));
    for x in &r {
        let _ = b.handle(Input::Request(x.clone()));
    }
    run(
        &mut b,
        vec![
            // Another shard's block: nothing changes.
            step(
                Input::Ordered {
                    id: BatchId::new(1, 1, 1),
                    requests: r[0..2].to_vec(),
                },
                vec![],
            ),
            // This batcher never pulled seq 1: its requests go, and it pulls seq 2 next.
            step(
                Input::Ordered {
                    id: b1.id(),
                    requests: b1.requests.clone(),
                },
                vec![pull(1, 2)],
            ),
            step(
                Input::Request(r[0].clone()),
                vec![refused(&r[0], RefuseReason::Duplicate)],
            ),
            // The skipped batch, served late, is ignored.
            step(
                Input::Batch {
                    from: 1,
                    batch: (*b1).clone(),
                },
                vec![],
            ),
        ],
    );
    assert_eq!(b.pending(), (1, 10));
    assert_eq!(b.next_seq(), Some(2));
}

/// A late equivocation seen by a secondary: it holds version B of seq 1 (with the
/// victim's request), and the consenters order version A (without it). Before, B stayed
/// in flight for ever: the victim's request was neither pending (no censorship watch, no
/// forward) nor resubmittable (refused as a duplicate). Now it goes back to the pending
/// queue at once, and the secondary sends its BAF for B as evidence (the consenters then
/// change the term).
#[test]
fn an_ordered_other_version_of_a_held_batch_returns_its_requests() {
    let mut b = batcher(2);
    let victim = req(7, 20);
    let other = req(8, 20);
    let version_b = signed(1, 1, vec![other.clone(), victim.clone()]);
    let version_a = signed(1, 1, vec![other.clone()]);
    let _ = b.handle(Input::Tick(0));
    let _ = b.handle(Input::Batch {
        from: 1,
        batch: (*version_b).clone(),
    });
    let _ = b.handle(persisted(&version_b));
    assert_eq!(b.in_flight(), (2, 40));
    assert_eq!(b.pending(), (0, 0));
    let out = b.handle(Input::Ordered {
        id: version_a.id(),
        requests: version_a.requests.clone(),
    });
    assert_eq!(b.in_flight(), (0, 0), "the losing version left the flight");
    assert_eq!(b.pending(), (1, 20), "the victim's request is pending again");
    assert!(b.knows(&RequestDigest::of(&victim)));
    assert_eq!(out, vec![Output::SendEvidence(baf(&version_b, 2))], "{out:?}");
    // The ordered request stays ordered; the victim's is not refused as ordered.
    let out = b.handle(Input::Request(other.clone()));
    assert_eq!(out, vec![refused(&other, RefuseReason::Duplicate)]);
}

#[test]
fn the_unordered_bound_stops_cutting_and_pulling() {
    // Window 4 = unordered bound 4; acks confirm every batch, ordering frees them.
    let mut cfg = config(1, 1);
    cfg.window = std::num::NonZeroU32::new(4).unwrap();
    cfg.mempool_max_requests = std::num::NonZeroUsize::new(100).unwrap();
    cfg.mempool_max_bytes = std::num::NonZeroU64::new(10_000).unwrap();
    let mut p = Batcher::new(
        cfg,
        key(1),
        TermInfo {
            term: 0,
            last_ordered_seq: 0,
        },
    )
    .unwrap();
    let mut batches = Vec::new();
    for i in 0..15u32 {
        let out = p.handle(Input::Request(req(i, 4)));
        for o in out {
            if let Output::Persist(b) = o {
                batches.push(b);
            }
        }
    }
    assert_eq!(batches.len(), 4, "window 4 then the unordered bound");
    for b in &batches {
        let _ = p.handle(persisted(b));
        let _ = p.handle(Input::Baf(baf(b, 2)));
    }
    assert_eq!(p.unconfirmed_batches(), 0);
    assert_eq!(p.unordered_batches(), 4);
    assert_eq!(
        p.handle(Input::Tick(1000)),
        vec![],
        "confirmed but unordered: no cut"
    );
    let out = p.handle(Input::Ordered {
        id: batches[0].id(),
        requests: batches[0].requests.clone(),
    });
    let next = signed(5, 1, (12..15).map(|i| req(i, 4)).collect());
    assert_eq!(out, vec![Output::Persist(next)]);

    // A secondary at the bound stops pulling, and pulls again once a batch is ordered.
    let mut s = batcher(2);
    assert_eq!(s.handle(Input::Tick(0)), vec![pull(1, 1)]);
    let mut held = Vec::new();
    for seq in 1..=4u64 {
        let b = signed(seq, 1, vec![req(100 + seq as u32, 4)]);
        let expect = if seq < 4 {
            vec![Output::Persist(b.clone()), pull(1, seq + 1)]
        } else {
            vec![Output::Persist(b.clone())]
        };
        assert_eq!(
            s.handle(Input::Batch {
                from: 1,
                batch: (*b).clone()
            }),
            expect,
            "seq {seq}"
        );
        held.push(b);
    }
    let fifth = signed(5, 1, vec![req(105, 4)]);
    assert_eq!(
        s.handle(Input::Batch {
            from: 1,
            batch: (*fifth).clone()
        }),
        vec![]
    );
    let out = s.handle(Input::Ordered {
        id: held[0].id(),
        requests: held[0].requests.clone(),
    });
    assert_eq!(out, vec![pull(1, 5)]);
}

#[test]
fn a_config_update_changes_the_batching_parameters_and_an_invalid_one_changes_nothing() {
    let mut b = Batcher::new(
        config(1, 1),
        key(1),
        TermInfo {
            term: 0,
            last_ordered_seq: 0,
        },
    )
    .unwrap();
    let before = b.config().clone();
    let next = arma::BatchingView {
        max_batch_requests: 7,
        max_batch_bytes: before.max_batch_bytes.get() * 2,
        batch_timeout_ms: before.batch_timeout_ms + 15,
        forward_timeout_ms: 1_000,
        complain_timeout_ms: 5_000,
    };
    b.set_batching(&next).unwrap();
    let c = b.config();
    assert_eq!(
        (
            c.max_batch_requests.get(),
            c.max_batch_bytes.get(),
            c.batch_timeout_ms,
            c.forward_timeout_ms,
            c.complain_timeout_ms
        ),
        (7, next.max_batch_bytes, next.batch_timeout_ms, 1_000, 5_000)
    );
    // A complaint timeout below the forward timeout, or an empty batch, is refused.
    for bad in [
        arma::BatchingView {
            complain_timeout_ms: 10,
            ..next
        },
        arma::BatchingView {
            max_batch_requests: 0,
            ..next
        },
    ] {
        assert!(b.set_batching(&bad).is_err(), "{bad:?}");
        assert_eq!(b.config().batch_timeout_ms, next.batch_timeout_ms);
        assert_eq!(b.config().complain_timeout_ms, 5_000);
    }
}

/// A config that rotates batcher keys: after `set_keys` the secondary verifies the
/// primary's batches with the new key (an old-key batch is bogus, a new-key one is taken)
/// and signs its BAF with its own new key; a key set without this batcher's party
/// changes nothing.
#[test]
fn a_key_rotation_changes_who_verifies_and_signs() {
    let new_key = |p: u32| crypto::derive_signing_key(crypto::Scheme::Ed25519, &format!("rotated-{p}"));
    let mut s = batcher(2);
    let _ = s.handle(Input::Tick(0));
    let r = req(1, 20);
    let _ = s.handle(Input::Request(r.clone()));
    let keys: std::collections::BTreeMap<_, _> = (1..=N).map(|p| (p, new_key(p).public_key())).collect();
    let mut partial = keys.clone();
    partial.remove(&2);
    assert!(s.set_keys(partial, new_key(2)).is_err());
    assert!(
        s.is_own_key(&key(2).public_key()),
        "a refused key set changes nothing"
    );
    s.set_keys(keys, new_key(2)).unwrap();
    assert!(s.is_own_key(&new_key(2).public_key()));
    let old = signed(1, 1, vec![r.clone()]);
    assert!(matches!(
        s.handle(Input::Batch {
            from: 1,
            batch: (*old).clone()
        })
        .first(),
        Some(Output::BatchRejected {
            error: Error::BadBatchSignature { .. },
            ..
        })
    ));
    let mut s = batcher(2);
    let _ = s.handle(Input::Tick(0));
    let _ = s.handle(Input::Request(r.clone()));
    s.set_keys(
        (1..=N).map(|p| (p, new_key(p).public_key())).collect(),
        new_key(2),
    )
    .unwrap();
    let fresh = Arc::new(SignedBatch::sign(BatchId::new(0, 1, 1), 0, vec![r], &new_key(1)));
    assert_eq!(
        s.handle(Input::Batch {
            from: 1,
            batch: (*fresh).clone()
        }),
        vec![Output::Persist(fresh.clone()), pull(1, 2)]
    );
    let out = s.handle(persisted(&fresh));
    let baf = Baf::sign(&fresh, 2, &new_key(2));
    assert!(out.contains(&Output::SendBaf(baf)), "{out:?}");
}

/// A config that adds parties (docs/reconfiguration.md "Adding a party"): after
/// `set_keys` names seven batchers, a batch needs f + 1 = 3 acknowledgements instead of 2,
/// the new parties' acks count, the primaries rotate over seven parties from the next
/// term on, and a key set without this batcher's party, or with none, changes nothing.
#[test]
fn a_party_joining_changes_the_quorum_and_the_primaries() {
    let joined = |p: u32| {
        if p <= N {
            key(p)
        } else {
            crypto::derive_signing_key(crypto::Scheme::Ed25519, &format!("joined-{p}"))
        }
    };
    let seven: std::collections::BTreeMap<_, _> = (1..=7).map(|p| (p, joined(p).public_key())).collect();
    let mut p = batcher(1);
    let _ = p.handle(Input::Tick(0));
    assert!(matches!(
        p.set_keys(std::collections::BTreeMap::new(), key(1)),
        Err(Error::BadKeySet { .. })
    ));
    let mut without_me = seven.clone();
    without_me.remove(&1);
    assert!(matches!(
        p.set_keys(without_me, key(1)),
        Err(Error::PartyOutOfRange { party: 1, .. })
    ));
    assert_eq!(
        p.config().parties,
        arma::Parties::contiguous(N),
        "a refused key set changes nothing"
    );
    p.set_keys(seven.clone(), key(1)).unwrap();
    assert_eq!(p.config().parties, arma::Parties::contiguous(7));
    // The primary of term 0 cuts a batch; its own ack and party 2's make 2 of the 3 now needed.
    let r = req(1, 20);
    let _ = p.handle(Input::Request(r.clone()));
    let out = p.handle(Input::Tick(50));
    let b1 = signed(1, 1, vec![r]);
    assert_eq!(out, vec![Output::Persist(b1.clone())]);
    let _ = p.handle(persisted(&b1));
    let _ = p.handle(Input::Baf(baf(&b1, 2)));
    assert_eq!(
        p.unconfirmed_batches(),
        1,
        "two acks of seven parties confirm nothing"
    );
    // A joined party's ack, signed with its key, is the third.
    let _ = p.handle(Input::Baf(Baf::sign(&b1, 6, &joined(6))));
    assert_eq!(p.unconfirmed_batches(), 0);
    // Term 4: ((0 + 4) mod 7) + 1 = 5, a joined party (with four parties it would be 1).
    let _ = p.handle(Input::TermChanged(TermInfo {
        term: 4,
        last_ordered_seq: 0,
    }));
    assert_eq!(p.primary(), 5);
    assert!(!p.is_primary());
    // A batcher restarted after the join is built from the genesis config (four parties)
    // in term 4, where party 1 would be primary, and put back under the config in force:
    // the primary is the one of seven parties at once, not at the next term change.
    let mut restarted = Batcher::new(
        config(1, 1),
        key(1),
        TermInfo {
            term: 4,
            last_ordered_seq: 0,
        },
    )
    .unwrap();
    assert!(restarted.is_primary());
    restarted.set_keys(seven, key(1)).unwrap();
    assert_eq!(restarted.primary(), 5);
    assert!(
        !restarted.is_primary(),
        "party 1 is not the primary of term 4 among seven"
    );
}

/// A config that removes a party (docs/reconfiguration.md "Removing a party"): with
/// parties 1, 3, 4, 5 in force a batch needs f + 1 = 2 acknowledgements, the party that
/// left no longer counts, and the primaries rotate over the four that remain.
#[test]
fn a_party_leaving_changes_the_quorum_and_the_primaries() {
    let five = |p: u32| {
        if p <= N {
            key(p)
        } else {
            crypto::derive_signing_key(crypto::Scheme::Ed25519, &format!("joined-{p}"))
        }
    };
    let mut p = batcher(1);
    let _ = p.handle(Input::Tick(0));
    let all: std::collections::BTreeMap<_, _> = (1..=5).map(|q| (q, five(q).public_key())).collect();
    p.set_keys(all.clone(), key(1)).unwrap();
    let mut left = all;
    left.remove(&2);
    p.set_keys(left, key(1)).unwrap();
    assert_eq!(p.config().parties.ids(), &[1, 3, 4, 5]);
    // Term 0: party 1 cuts; the ack of party 2, which left, is not counted.
    let r = req(1, 20);
    let _ = p.handle(Input::Request(r.clone()));
    let out = p.handle(Input::Tick(50));
    let b1 = signed(1, 1, vec![r]);
    assert_eq!(out, vec![Output::Persist(b1.clone())]);
    let _ = p.handle(persisted(&b1));
    let _ = p.handle(Input::Baf(baf(&b1, 2)));
    assert_eq!(
        p.unconfirmed_batches(),
        1,
        "the ack of a party that left counts for nothing"
    );
    let _ = p.handle(Input::Baf(baf(&b1, 3)));
    assert_eq!(p.unconfirmed_batches(), 0);
    // Term 1 of shard 0: the second party in force, 3 (with parties 1..=4 it was 2).
    let _ = p.handle(Input::TermChanged(TermInfo {
        term: 1,
        last_ordered_seq: 1,
    }));
    assert_eq!(p.primary(), 3);
}

/// A batcher signs its BAFs and complaints under the config sequence in force
/// (`set_config_sequence`, at the switch and again at a restart).
#[test]
fn bafs_and_complaints_name_the_config_in_force() {
    let mut s = batcher(2);
    assert_eq!(s.config_sequence(), 0);
    s.set_config_sequence(5);
    let _ = s.handle(Input::Tick(0));
    let r = req(1, 20);
    let _ = s.handle(Input::Request(r.clone()));
    let b1 = signed(1, 1, vec![r]);
    let _ = s.handle(Input::Batch {
        from: 1,
        batch: (*b1).clone(),
    });
    let out = s.handle(persisted(&b1));
    let baf = Baf::sign_at(5, &b1, 2, &key(2));
    assert!(out.contains(&Output::SendBaf(baf.clone())), "{out:?}");
    assert_eq!(baf.config, 5);
    // A request pending past the complain timeout: the complaint names sequence 5 too.
    let late = req(2, 20);
    let _ = s.handle(Input::Request(late));
    let out = s.handle(Input::Tick(1_000));
    let complaint = out
        .iter()
        .find_map(|o| match o {
            Output::Complain(c) => Some(c.clone()),
            _ => None,
        })
        .expect("a complaint");
    assert_eq!(complaint.config, 5);
    assert!(complaint.verifies(&key(2).public_key()));
    // A primary counts only acks of its config: one under sequence 4 confirms nothing.
    let mut p = batcher(1);
    p.set_config_sequence(5);
    let _ = p.handle(Input::Tick(0));
    let r = req(3, 20);
    let _ = p.handle(Input::Request(r.clone()));
    let _ = p.handle(Input::Tick(50));
    let b = signed(1, 1, vec![r]);
    let _ = p.handle(persisted(&b));
    let _ = p.handle(Input::Baf(Baf::sign_at(4, &b, 2, &key(2))));
    assert_eq!(p.unconfirmed_batches(), 1, "an ack of another config counts");
    let _ = p.handle(Input::Baf(Baf::sign_at(5, &b, 2, &key(2))));
    assert_eq!(p.unconfirmed_batches(), 0);
}

fn compact(b: &SignedBatch) -> batcher::CompactBatch {
    batcher::CompactBatch::of(b, b.requests.iter().map(|r| RequestDigest::of(r)).collect())
}

fn need_full(b: &SignedBatch) -> Output {
    Output::NeedFullBatch {
        from: 1,
        id: b.id(),
        digest: b.header.digest,
    }
}

/// A secondary rebuilds a compact batch from its pending requests and takes it as the
/// full batch; what depends on the bytes asks for the full batch, what the digests alone
/// show wrong is bogus (docs/batcher.md "Compact pulls").
#[test]
fn a_compact_batch_is_rebuilt_from_pending_requests_or_fetched_whole() {
    let r: Vec<_> = (0..3).map(|i| req(i, 20)).collect();
    let b1 = signed(1, 1, r.clone());
    let held = |s: &mut Batcher, requests: &[batcher::Request]| {
        let _ = s.handle(Input::Tick(0));
        for q in requests {
            assert_eq!(s.handle(Input::Request(q.clone())), vec![admitted(q)]);
        }
    };
    // Every request pending: the same outputs as for the full batch, the same batch.
    let mut s = batcher(2);
    held(&mut s, &r);
    run(
        &mut s,
        vec![
            // Not from the primary, or not the seq asked for: ignored.
            step(
                Input::CompactBatch {
                    from: 3,
                    batch: compact(&b1),
                },
                vec![],
            ),
            step(
                Input::CompactBatch {
                    from: 1,
                    batch: compact(&signed(2, 1, vec![r[0].clone()])),
                },
                vec![],
            ),
            step(
                Input::CompactBatch {
                    from: 1,
                    batch: compact(&b1),
                },
                vec![Output::Persist(b1.clone()), pull(1, 2)],
            ),
            step(
                persisted(&b1),
                vec![
                    Output::Serve(b1.clone()),
                    Output::SendBaf(baf(&b1, 2)),
                    Output::AckPrimary {
                        to: 1,
                        baf: baf(&b1, 2),
                    },
                ],
            ),
        ],
    );
    assert_eq!(s.pending(), (0, 0));
    assert_eq!(
        s.request_digests(b1.id(), &b1.header.digest).map(<[_]>::len),
        Some(3)
    );

    // One request not pending here: the full batch is asked for and nothing changes; the
    // full batch then goes through as usual.
    let mut s = batcher(2);
    held(&mut s, &r[..2]);
    run(
        &mut s,
        vec![
            step(
                Input::CompactBatch {
                    from: 1,
                    batch: compact(&b1),
                },
                vec![need_full(&b1)],
            ),
            step(
                Input::Batch {
                    from: 1,
                    batch: (*b1).clone(),
                },
                vec![Output::Persist(b1.clone()), pull(1, 2)],
            ),
        ],
    );

    // The same content pending here under another client signature: the bytes differ
    // (so the batch digest does), the primary is not at fault, the full batch is asked for.
    let envelope = |signature: u8| -> batcher::Request {
        let mut bytes = vec![0x0a, 4, b't', b'x', b'-', b'1', 0x12, 3];
        bytes.extend([signature; 3]);
        Arc::from(bytes)
    };
    let theirs = signed(1, 1, vec![envelope(1)]);
    let mut s = batcher(2);
    held(&mut s, &[envelope(2)]);
    run(
        &mut s,
        vec![step(
            Input::CompactBatch {
                from: 1,
                batch: compact(&theirs),
            },
            vec![need_full(&theirs)],
        )],
    );

    // Bogus whatever the bytes: a repeated digest, a wrong count, a bad signature, a
    // request already ordered.
    let bogus = |s: &mut Batcher, batch: batcher::CompactBatch| -> Option<Error> {
        match s.handle(Input::CompactBatch { from: 1, batch }).first() {
            Some(Output::BatchRejected { error, .. }) => Some(error.clone()),
            _ => None,
        }
    };
    let mut twice = compact(&b1);
    twice.digests[2] = twice.digests[0];
    let mut s = batcher(2);
    held(&mut s, &r);
    assert!(matches!(
        bogus(&mut s, twice),
        Some(Error::DuplicateRequestInBatch { index: 2, .. })
    ));
    let mut count = compact(&b1);
    count.digests.pop();
    let mut s = batcher(2);
    held(&mut s, &r);
    assert!(matches!(
        bogus(&mut s, count),
        Some(Error::TxCountMismatch { .. })
    ));
    let mut forged = compact(&b1);
    forged.signature = signed(1, 2, r.clone()).signature.clone();
    let mut s = batcher(2);
    held(&mut s, &r);
    assert!(matches!(
        bogus(&mut s, forged),
        Some(Error::BadBatchSignature { .. })
    ));
    let mut s = batcher(2);
    held(&mut s, &r);
    let _ = s.handle(Input::Ordered {
        id: BatchId::new(0, 3, 9),
        requests: vec![r[1].clone()],
    });
    assert!(matches!(
        bogus(&mut s, compact(&b1)),
        Some(Error::RequestNotNew { index: 1, .. })
    ));
}
