//! Table tests of the committer's pure core: each step is an input and the exact outputs
//! it must produce, run without a runtime.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use sidecar::core::{BlockResult, CommitterCore, Finished, Input, Job, JobTx, Output, PipelineConfig};
use std::sync::Arc;
use types::{
    Block, Endorsement, Height, META_NAMESPACE, NamespacePolicy, PolicyScheme, ReadWrite, Status, Tx, TxId,
    TxNamespace, TxOutcome, VcTx, Write,
};

/// A signed-looking tx writing `key` in `ns` (the core never checks signatures).
fn write(ns: &str, key: &str) -> Arc<Tx> {
    Arc::new(Tx {
        namespaces: vec![TxNamespace {
            ns_id: ns.into(),
            blind_writes: vec![Write {
                key: key.as_bytes().to_vec(),
                value: b"v".to_vec(),
            }],
            ..TxNamespace::default()
        }],
        endorsements: vec![vec![Endorsement {
            signature: vec![1],
            ..Endorsement::default()
        }]],
        metadata: vec![],
    })
}

fn policy() -> NamespacePolicy {
    // An Ed25519 key of the right length (structure only; never used to verify here).
    NamespacePolicy {
        scheme: PolicyScheme::Ed25519,
        public_key: crypto::derive_signing_key(crypto::Scheme::Ed25519, "core-test")
            .public_key()
            .to_bytes(),
    }
}

/// A `_meta` tx creating namespace `ns` with [`policy`].
fn create(ns: &str) -> Arc<Tx> {
    Arc::new(Tx {
        namespaces: vec![TxNamespace {
            ns_id: META_NAMESPACE.into(),
            read_writes: vec![ReadWrite {
                key: ns.as_bytes().to_vec(),
                version: None,
                value: wire::encode_policy(&policy()),
            }],
            ..TxNamespace::default()
        }],
        endorsements: vec![vec![Endorsement {
            signature: vec![1],
            ..Endorsement::default()
        }]],
        metadata: vec![],
    })
}

fn id(s: &str) -> TxId {
    TxId(s.into())
}

fn job_tx(
    name: &str,
    h: Height,
    tx: &Arc<Tx>,
    verify: bool,
    in_graph: bool,
    prelim: Option<Status>,
) -> JobTx {
    JobTx {
        vtx: VcTx {
            id: id(name),
            height: h,
            tx: tx.clone(),
            prelim,
        },
        verify,
        in_graph,
        body: None,
    }
}

fn released(name: &str, h: Height, tx: &Arc<Tx>) -> JobTx {
    job_tx(name, h, tx, true, true, None)
}

fn done(name: &str, h: Height, status: Status, tx: &Arc<Tx>, in_graph: bool) -> Finished {
    Finished {
        outcome: TxOutcome::new(id(name), status, h),
        in_graph,
        tx: tx.clone(),
    }
}

fn block(number: u64, txs: Vec<(&str, &Arc<Tx>)>) -> Block {
    Block::unordered(number, txs.into_iter().map(|(n, t)| (id(n), t.clone())).collect())
}

fn core(workers: usize, max_batch: usize) -> CommitterCore {
    CommitterCore::new(PipelineConfig {
        workers: std::num::NonZeroUsize::new(workers).unwrap(),
        max_batch: std::num::NonZeroUsize::new(max_batch).unwrap(),
        ..PipelineConfig::default()
    })
}

struct Step {
    input: Input,
    want: Vec<Output>,
}

fn run(mut c: CommitterCore, steps: Vec<Step>) -> CommitterCore {
    for (i, step) in steps.into_iter().enumerate() {
        let got = c.handle(step.input).unwrap();
        assert_eq!(got, step.want, "step {i}");
    }
    c
}

#[test]
fn conflicting_txs_wait_and_blocks_finish_in_order() {
    let (a, b) = (write("token", "k"), write("token", "k"));
    let other = write("token", "x");
    let h = Height::new;
    let c = run(
        core(4, 10),
        vec![
            // t0 and t1 write the same key: only t0 is released; t2 is independent.
            Step {
                input: Input::Blocks(vec![
                    block(0, vec![("t0", &a), ("t1", &b)]),
                    block(1, vec![("t2", &other)]),
                ]),
                want: vec![Output::Dispatch(Job {
                    txs: vec![released("t0", h(0, 0), &a), released("t2", h(1, 0), &other)],
                })],
            },
            // t2 finishes first: block 1 waits for block 0.
            Step {
                input: Input::JobDone(vec![
                    done("t0", h(0, 0), Status::Committed, &a, true),
                    done("t2", h(1, 0), Status::Committed, &other, true),
                ]),
                want: vec![Output::Dispatch(Job {
                    txs: vec![released("t1", h(0, 1), &b)],
                })],
            },
            Step {
                input: Input::JobDone(vec![done("t1", h(0, 1), Status::AbortedMvccConflict, &b, true)]),
                want: vec![
                    Output::BlockFinal(BlockResult {
                        number: 0,
                        statuses: vec![
                            (id("t0"), Status::Committed),
                            (id("t1"), Status::AbortedMvccConflict),
                        ],
                        stored: None,
                    }),
                    Output::BlockFinal(BlockResult {
                        number: 1,
                        statuses: vec![(id("t2"), Status::Committed)],
                        stored: None,
                    }),
                ],
            },
        ],
    );
    assert!(c.is_idle());
    assert_eq!(c.next_block(), 2);
}

#[test]
fn intake_answers_stores_and_schedules() {
    let tx = write("token", "k");
    let bad_ns = write("Bad", "k");
    let h = Height::new;
    run(
        core(4, 10),
        vec![
            // A duplicate id in the block is answered at once (never stored), a malformed
            // tx goes to the vcservice only to store its status, a good tx is scheduled.
            Step {
                input: Input::Blocks(vec![block(0, vec![("a", &tx), ("a", &tx), ("b", &bad_ns)])]),
                want: vec![Output::Dispatch(Job {
                    txs: vec![
                        job_tx(
                            "b",
                            h(0, 2),
                            &bad_ns,
                            false,
                            false,
                            Some(Status::MalformedNamespaceIdInvalid),
                        ),
                        released("a", h(0, 0), &tx),
                    ],
                })],
            },
            Step {
                input: Input::JobDone(vec![
                    done("b", h(0, 2), Status::MalformedNamespaceIdInvalid, &bad_ns, false),
                    done("a", h(0, 0), Status::Committed, &tx, true),
                ]),
                want: vec![Output::BlockFinal(BlockResult {
                    number: 0,
                    statuses: vec![
                        (id("a"), Status::Committed),
                        (id("a"), Status::RejectedDuplicateTxId),
                        (id("b"), Status::MalformedNamespaceIdInvalid),
                    ],
                    stored: None,
                })],
            },
        ],
    );
}

#[test]
fn a_committed_policy_is_set_before_the_jobs_it_released() {
    let create = create("coin");
    let data = write("coin", "k");
    let h = Height::new;
    run(
        core(4, 10),
        vec![
            // The data tx implicitly reads (_meta, coin): it waits for the creation.
            Step {
                input: Input::Blocks(vec![block(0, vec![("c", &create), ("d", &data)])]),
                want: vec![Output::Dispatch(Job {
                    txs: vec![released("c", h(0, 0), &create)],
                })],
            },
            Step {
                input: Input::JobDone(vec![done("c", h(0, 0), Status::Committed, &create, true)]),
                want: vec![
                    Output::SetPolicy {
                        ns: "coin".into(),
                        policy: policy(),
                    },
                    Output::Dispatch(Job {
                        txs: vec![released("d", h(0, 1), &data)],
                    }),
                ],
            },
        ],
    );
}

#[test]
fn an_aborted_policy_change_sets_nothing() {
    let create = create("coin");
    let h = Height::new;
    run(
        core(4, 10),
        vec![
            Step {
                input: Input::Blocks(vec![block(0, vec![("c", &create)])]),
                want: vec![Output::Dispatch(Job {
                    txs: vec![released("c", h(0, 0), &create)],
                })],
            },
            Step {
                input: Input::JobDone(vec![done(
                    "c",
                    h(0, 0),
                    Status::AbortedSignatureInvalid,
                    &create,
                    true,
                )]),
                want: vec![Output::BlockFinal(BlockResult {
                    number: 0,
                    statuses: vec![(id("c"), Status::AbortedSignatureInvalid)],
                    stored: None,
                })],
            },
        ],
    );
}

#[test]
fn jobs_are_limited_by_workers_and_batch_size() {
    let txs: Vec<Arc<Tx>> = (0..5).map(|i| write("token", &format!("k{i}"))).collect();
    let names = ["t0", "t1", "t2", "t3", "t4"];
    let h = Height::new;
    let mut c = core(2, 2);
    let out = c
        .handle(Input::Blocks(vec![block(
            0,
            names.iter().copied().zip(txs.iter()).collect(),
        )]))
        .unwrap();
    // Two workers, two txs each; the fifth waits for a worker.
    assert_eq!(
        out,
        vec![
            Output::Dispatch(Job {
                txs: vec![released("t0", h(0, 0), &txs[0]), released("t1", h(0, 1), &txs[1])],
            }),
            Output::Dispatch(Job {
                txs: vec![released("t2", h(0, 2), &txs[2]), released("t3", h(0, 3), &txs[3])],
            }),
        ]
    );
    assert_eq!(c.jobs(), 2);
    let out = c
        .handle(Input::JobDone(vec![
            done("t0", h(0, 0), Status::Committed, &txs[0], true),
            done("t1", h(0, 1), Status::Committed, &txs[1], true),
        ]))
        .unwrap();
    assert_eq!(
        out,
        vec![Output::Dispatch(Job {
            txs: vec![released("t4", h(0, 4), &txs[4])],
        })]
    );
}

#[test]
fn out_of_order_blocks_and_unknown_outcomes_are_errors() {
    let tx = write("token", "k");
    let mut c = core(4, 10);
    assert!(c.handle(Input::Blocks(vec![block(1, vec![("a", &tx)])])).is_err());
    let mut c2 = core(4, 10);
    c2.handle(Input::Blocks(vec![block(0, vec![("a", &tx)])]))
        .unwrap();
    // An outcome for a height that is not pending (a misbehaving commit stage).
    let err = c2.handle(Input::JobDone(vec![done(
        "a",
        Height::new(5, 0),
        Status::Committed,
        &tx,
        true,
    )]));
    assert!(err.is_err());
    let _ = c;
}

#[test]
fn room_is_bounded_by_the_graph_and_parallel_blocks() {
    let c = CommitterCore::new(PipelineConfig {
        parallel_blocks: std::num::NonZeroUsize::new(2).unwrap(),
        graph: coordinator::GraphConfig {
            max_pending: 10,
            ..coordinator::GraphConfig::default()
        },
        ..PipelineConfig::default()
    });
    assert!(c.has_room(0, 0));
    assert!(c.has_room(1, 9));
    assert!(!c.has_room(1, 10), "graph limit counts unmerged txs");
    assert!(!c.has_room(2, 0), "at most parallel_blocks at a time");
}

/// With `encode_blocks`, every job tx carries its body from the block's stored form
/// (scheduled, stored-only and released-later txs alike), and the final block carries
/// the stored form: the bytes of `wire::encode::block_vc_batch`.
#[test]
fn encoded_blocks_hand_each_tx_its_body() {
    use wire::encode::TxBody;
    let (a, b) = (write("token", "k"), write("token", "k"));
    let bad_ns = write("Bad", "x");
    let h = Height::new;
    let with_body = |mut t: JobTx, tx: &Arc<Tx>| {
        t.body = Some(TxBody::of(tx));
        t
    };
    let b0 = block(0, vec![("t0", &a), ("bad", &bad_ns), ("t1", &b)]);
    let stored = wire::encode::block_vc_batch(&b0).unwrap();
    let c = CommitterCore::new(PipelineConfig {
        encode_blocks: true,
        ..PipelineConfig::default()
    });
    run(
        c,
        vec![
            Step {
                input: Input::Blocks(vec![b0]),
                want: vec![Output::Dispatch(Job {
                    txs: vec![
                        with_body(
                            job_tx(
                                "bad",
                                h(0, 1),
                                &bad_ns,
                                false,
                                false,
                                Some(Status::MalformedNamespaceIdInvalid),
                            ),
                            &bad_ns,
                        ),
                        with_body(released("t0", h(0, 0), &a), &a),
                    ],
                })],
            },
            // t1 conflicts with t0: released when t0 finishes, with its body.
            Step {
                input: Input::JobDone(vec![
                    done(
                        "bad",
                        h(0, 1),
                        Status::MalformedNamespaceIdInvalid,
                        &bad_ns,
                        false,
                    ),
                    done("t0", h(0, 0), Status::Committed, &a, true),
                ]),
                want: vec![Output::Dispatch(Job {
                    txs: vec![with_body(released("t1", h(0, 2), &b), &b)],
                })],
            },
            Step {
                input: Input::JobDone(vec![done("t1", h(0, 2), Status::AbortedMvccConflict, &b, true)]),
                want: vec![Output::BlockFinal(BlockResult {
                    number: 0,
                    statuses: vec![
                        (id("t0"), Status::Committed),
                        (id("bad"), Status::MalformedNamespaceIdInvalid),
                        (id("t1"), Status::AbortedMvccConflict),
                    ],
                    stored: Some(stored.into()),
                })],
            },
        ],
    );
}

/// Blocks admitted together give the same outputs whether their local graphs are built
/// on the rayon pool or one after the other.
#[test]
fn sequential_and_parallel_builds_agree() {
    let txs: Vec<Arc<Tx>> = (0..24).map(|i| write("token", &format!("k{}", i % 5))).collect();
    let blocks = || -> Vec<Block> {
        (0..4u64)
            .map(|b| {
                let names: Vec<String> = (0..6).map(|i| format!("t{b}-{i}")).collect();
                let txs: Vec<(&str, &Arc<Tx>)> = names
                    .iter()
                    .zip(&txs[(b as usize) * 6..])
                    .map(|(n, t)| (n.as_str(), t))
                    .collect();
                Block::unordered(b, txs.into_iter().map(|(n, t)| (id(n), t.clone())).collect())
            })
            .collect()
    };
    let run_all = |parallel: bool| {
        let mut c = CommitterCore::new(PipelineConfig {
            workers: std::num::NonZeroUsize::new(2).unwrap(),
            max_batch: std::num::NonZeroUsize::new(3).unwrap(),
            build_in_parallel: parallel,
            ..PipelineConfig::default()
        });
        let mut log = Vec::new();
        let mut jobs = std::collections::VecDeque::new();
        let mut out = c.handle(Input::Blocks(blocks())).unwrap();
        loop {
            log.extend(out.iter().cloned());
            jobs.extend(out.into_iter().filter_map(|o| match o {
                Output::Dispatch(j) => Some(j),
                _ => None,
            }));
            // The oldest job finishes first.
            let Some(job) = jobs.pop_front() else {
                break;
            };
            let finished = job
                .txs
                .iter()
                .map(|t| Finished {
                    outcome: TxOutcome::new(t.vtx.id.clone(), Status::Committed, t.vtx.height),
                    in_graph: t.in_graph,
                    tx: t.vtx.tx.clone(),
                })
                .collect();
            out = c.handle(Input::JobDone(finished)).unwrap();
        }
        log
    };
    let sequential = run_all(false);
    let finals = sequential
        .iter()
        .filter(|o| matches!(o, Output::BlockFinal(_)))
        .count();
    assert_eq!(finals, 4);
    assert_eq!(sequential, run_all(true));
}
