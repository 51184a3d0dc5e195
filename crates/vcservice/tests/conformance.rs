//! One conformance suite, run against both backends: every prepare/validate/commit rule of
//! the vcservice (FX §3.5, §3.6).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use types::Status::{self, *};
use types::{Height, TxId};
use vcservice::VcTx;

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name(super::postgres().await).await } )*
        }
        mod embedded {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name(super::embedded().await).await } )*
        }
    };
}

conformance!(
    versions_across_batches,
    insert_conflicts,
    blind_writes_on_new_and_existing_keys,
    multi_namespace_atomicity,
    resubmission_sequential,
    resubmission_concurrent,
    resubmission_to_two_instances,
    duplicate_ids_at_other_heights,
    namespace_lifecycle,
    upstream_statuses,
    last_committed_block,
    malformed_input_gets_a_status,
    unconflicted_batch_is_split,
    random_workloads_match_serial_oracle,
);

async fn setup(h: &Harness) {
    let out = h
        .engine
        .process(vec![meta("create_token", 0, 0, "token", None)])
        .await
        .unwrap();
    assert_eq!(statuses(&out), vec![("create_token".into(), Committed)]);
}

async fn versions_across_batches(h: Harness) {
    setup(&h).await;
    let b1 = vec![tx("a", 1, 0, vec![ns("token", 0).rw("k", None, "v0")])];
    let b2 = vec![tx("b", 2, 0, vec![ns("token", 0).rw("k", Some(0), "v1")])];
    let b3 = vec![
        tx("stale", 3, 0, vec![ns("token", 0).rw("k", Some(0), "bad")]),
        tx(
            "read_stale",
            3,
            1,
            vec![ns("token", 0).read("k", Some(0)).blind("other", "x")],
        ),
    ];
    let b4 = vec![tx(
        "c",
        4,
        0,
        vec![ns("token", 0).read("k", Some(1)).rw("k2", None, "w")],
    )];
    let b5 = vec![tx("d", 5, 0, vec![ns("token", 0).rw("k", Some(1), "v2")])];
    for (batch, want) in [
        (b1, vec![Committed]),
        (b2, vec![Committed]),
        (b3, vec![AbortedMvccConflict, AbortedMvccConflict]),
        (b4, vec![Committed]),
        (b5, vec![Committed]),
    ] {
        let out = h.engine.process(batch).await.unwrap();
        assert_eq!(out.iter().map(|o| o.status).collect::<Vec<_>>(), want);
    }
    assert_eq!(
        state(&h.backend, "token").await,
        vec![("k".into(), "v2".into(), 2), ("k2".into(), "w".into(), 0)]
    );
}

async fn insert_conflicts(h: Harness) {
    setup(&h).await;
    let out = h
        .engine
        .process(vec![tx("a", 1, 0, vec![ns("token", 0).rw("k", None, "first")])])
        .await
        .unwrap();
    assert_eq!(out[0].status, Committed);
    // The key exists now: inserting it again is a conflict, and nothing of that tx applies.
    let out = h
        .engine
        .process(vec![tx(
            "b",
            2,
            0,
            vec![ns("token", 0).rw("k", None, "second").rw("k9", None, "x")],
        )])
        .await
        .unwrap();
    assert_eq!(out[0].status, AbortedMvccConflict);
    assert_eq!(
        state(&h.backend, "token").await,
        vec![("k".into(), "first".into(), 0)]
    );
}

async fn blind_writes_on_new_and_existing_keys(h: Harness) {
    setup(&h).await;
    for (i, v) in ["x0", "x1", "x2"].iter().enumerate() {
        let out = h
            .engine
            .process(vec![tx(
                &format!("w{i}"),
                1 + i as u64,
                0,
                vec![ns("token", 0).blind("k", v)],
            )])
            .await;
        assert_eq!(out.unwrap()[0].status, Committed);
    }
    assert_eq!(
        state(&h.backend, "token").await,
        vec![("k".into(), "x2".into(), 2)]
    );
}

async fn multi_namespace_atomicity(h: Harness) {
    setup(&h).await;
    h.engine
        .process(vec![meta("create_cash", 0, 1, "cash", None)])
        .await
        .unwrap();
    h.engine
        .process(vec![tx("seed", 1, 0, vec![ns("cash", 0).rw("c", None, "1")])])
        .await
        .unwrap();
    // Writes in token are fine, but the read in cash is stale: nothing applies.
    let bad = tx(
        "bad",
        2,
        0,
        vec![
            ns("token", 0).rw("t", None, "x"),
            ns("cash", 0).rw("c", Some(5), "2"),
        ],
    );
    assert_eq!(
        h.engine.process(vec![bad]).await.unwrap()[0].status,
        AbortedMvccConflict
    );
    assert!(state(&h.backend, "token").await.is_empty());
    let good = tx(
        "good",
        3,
        0,
        vec![
            ns("token", 0).rw("t", None, "x"),
            ns("cash", 0).rw("c", Some(0), "2"),
        ],
    );
    assert_eq!(h.engine.process(vec![good]).await.unwrap()[0].status, Committed);
    assert_eq!(
        state(&h.backend, "token").await,
        vec![("t".into(), "x".into(), 0)]
    );
    assert_eq!(state(&h.backend, "cash").await, vec![("c".into(), "2".into(), 1)]);
}

fn mixed_batch(block: u64) -> Vec<VcTx> {
    vec![
        tx("m1", block, 0, vec![ns("token", 0).blind("b", "blind")]),
        tx("m2", block, 1, vec![ns("token", 0).rw("n", None, "new")]),
        tx("m3", block, 2, vec![ns("token", 0).rw("missing", Some(3), "x")]),
    ]
}

async fn resubmission_sequential(h: Harness) {
    setup(&h).await;
    let first = h.engine.process(mixed_batch(1)).await.unwrap();
    let before = state(&h.backend, "token").await;
    let again = h.engine.process(mixed_batch(1)).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(
        statuses(&first).iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![Committed, Committed, AbortedMvccConflict]
    );
    // Nothing was written twice: the blind write did not bump its version again.
    assert_eq!(state(&h.backend, "token").await, before);
    assert_eq!(
        before,
        vec![("b".into(), "blind".into(), 0), ("n".into(), "new".into(), 0)]
    );
}

async fn resubmission_concurrent(h: Harness) {
    setup(&h).await;
    let (a, b) = tokio::join!(h.engine.process(mixed_batch(1)), h.engine.process(mixed_batch(1)));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b);
    assert_eq!(
        state(&h.backend, "token").await,
        vec![("b".into(), "blind".into(), 0), ("n".into(), "new".into(), 0)]
    );
}

async fn resubmission_to_two_instances(h: Harness) {
    setup(&h).await;
    for round in 0..5u64 {
        let batch = |b: u64| {
            vec![tx(
                &format!("r{b}"),
                b,
                0,
                vec![ns("token", 0).blind("hot", &format!("v{b}"))],
            )]
        };
        let (a, b) = tokio::join!(
            h.engine.process(batch(round + 1)),
            h.twin.process(batch(round + 1))
        );
        assert_eq!(a.unwrap(), b.unwrap());
    }
    // Five blind writes, each applied exactly once.
    assert_eq!(
        state(&h.backend, "token").await,
        vec![("hot".into(), "v5".into(), 4)]
    );
}

async fn duplicate_ids_at_other_heights(h: Harness) {
    setup(&h).await;
    h.engine
        .process(vec![tx("dup", 1, 0, vec![ns("token", 0).blind("k", "first")])])
        .await
        .unwrap();
    let out = h
        .engine
        .process(vec![tx("dup", 2, 3, vec![ns("token", 0).blind("k", "second")])])
        .await
        .unwrap();
    assert_eq!(out[0].status, RejectedDuplicateTxId);
    assert_eq!(out[0].height, Height::new(2, 3));
    let stored = h.backend.statuses(&[TxId("dup".into())]).await.unwrap();
    assert_eq!(stored[&TxId("dup".into())], (Committed, Height::new(1, 0)));
    assert_eq!(
        state(&h.backend, "token").await,
        vec![("k".into(), "first".into(), 0)]
    );
    // Two txs with one id in one batch: the first decides, the second is a duplicate.
    let out = h
        .engine
        .process(vec![
            tx("twice", 3, 0, vec![ns("token", 0).blind("x", "1")]),
            tx("twice", 3, 1, vec![ns("token", 0).blind("y", "2")]),
        ])
        .await
        .unwrap();
    assert_eq!(
        statuses(&out),
        vec![
            ("twice".into(), Committed),
            ("twice".into(), RejectedDuplicateTxId)
        ]
    );
}

async fn namespace_lifecycle(h: Harness) {
    // Unknown namespace: no `_meta` row, so the implicit read fails; no table is touched.
    let out = h
        .engine
        .process(vec![tx("early", 0, 0, vec![ns("token", 0).blind("k", "v")])])
        .await
        .unwrap();
    assert_eq!(out[0].status, AbortedMvccConflict);
    // Creation and use in one batch: split in order, both commit.
    let out = h
        .engine
        .process(vec![
            meta("create", 1, 0, "token", None),
            tx("use", 1, 1, vec![ns("token", 0).blind("k", "v")]),
        ])
        .await
        .unwrap();
    assert_eq!(
        statuses(&out),
        vec![("create".into(), Committed), ("use".into(), Committed)]
    );
    // Creating it again conflicts.
    let out = h
        .engine
        .process(vec![meta("again", 2, 0, "token", None)])
        .await
        .unwrap();
    assert_eq!(out[0].status, AbortedMvccConflict);
    // A policy update bumps the namespace version: txs endorsed for version 0 now abort.
    let out = h
        .engine
        .process(vec![meta("update", 3, 0, "token", Some(0))])
        .await
        .unwrap();
    assert_eq!(out[0].status, Committed);
    let out = h
        .engine
        .process(vec![
            tx("old_version", 4, 0, vec![ns("token", 0).blind("k", "x")]),
            tx("new_version", 4, 1, vec![ns("token", 1).blind("j", "y")]),
        ])
        .await
        .unwrap();
    assert_eq!(
        statuses(&out),
        vec![
            ("old_version".into(), AbortedMvccConflict),
            ("new_version".into(), Committed)
        ]
    );
    assert_eq!(
        h.backend.namespaces().await.unwrap(),
        vec!["_meta".to_string(), "token".to_string()]
    );
    assert_eq!(state(&h.backend, "_meta").await.len(), 1);
}

async fn upstream_statuses(h: Harness) {
    setup(&h).await;
    let mut sig = tx("sig", 1, 0, vec![ns("token", 0).blind("k", "v")]);
    sig.prelim = Some(AbortedSignatureInvalid);
    let mut dup = tx("dupe", 1, 1, vec![ns("token", 0).blind("k2", "v")]);
    dup.prelim = Some(RejectedDuplicateTxId);
    let mut mal = tx("mal", 1, 2, vec![ns("token", 0).blind("k3", "v")]);
    mal.prelim = Some(MalformedNoWrites);
    let out = h.engine.process(vec![sig, dup, mal]).await.unwrap();
    assert_eq!(
        out.iter().map(|o| o.status).collect::<Vec<_>>(),
        vec![AbortedSignatureInvalid, RejectedDuplicateTxId, MalformedNoWrites]
    );
    assert!(state(&h.backend, "token").await.is_empty());
    let ids: Vec<TxId> = ["sig", "dupe", "mal"]
        .iter()
        .map(|s| TxId(s.to_string()))
        .collect();
    let stored = h.backend.statuses(&ids).await.unwrap();
    assert_eq!(stored.len(), 2, "100 is never stored: {stored:?}");
    assert_eq!(stored[&ids[0]].0, AbortedSignatureInvalid);
    assert_eq!(stored[&ids[2]].0, MalformedNoWrites);
}

async fn last_committed_block(h: Harness) {
    assert_eq!(h.backend.last_committed_block().await.unwrap(), None);
    h.backend.set_last_committed_block(0).await.unwrap();
    assert_eq!(h.backend.last_committed_block().await.unwrap(), Some(0));
    h.backend.set_last_committed_block(7).await.unwrap();
    h.backend.set_last_committed_block(3).await.unwrap(); // never backwards
    assert_eq!(h.backend.last_committed_block().await.unwrap(), Some(7));
}

async fn malformed_input_gets_a_status(h: Harness) {
    setup(&h).await;
    let bad_ns = tx(
        "bad_ns",
        1,
        0,
        vec![ns("Robert'); DROP TABLE tx_status;--", 0).blind("k", "v")],
    );
    let huge = tx(
        "huge",
        1,
        1,
        vec![ns("token", 0).rw_bytes("k", None, vec![0; types::check::MAX_VALUE_LEN + 1])],
    );
    let bad_policy = tx(
        "bad_policy",
        1,
        2,
        vec![ns("_meta", 0).rw("cash", None, "not a policy")],
    );
    let empty_id = tx("", 1, 3, vec![ns("token", 0).blind("k", "v")]);
    let out = h
        .engine
        .process(vec![bad_ns, huge, bad_policy, empty_id])
        .await
        .unwrap();
    assert_eq!(
        out.iter().map(|o| o.status).collect::<Vec<_>>(),
        vec![
            MalformedNamespaceIdInvalid,
            MalformedBadEnvelopePayload,
            MalformedNamespacePolicyInvalid,
            MalformedMissingTxId
        ]
    );
    assert!(state(&h.backend, "token").await.is_empty());
    assert_eq!(
        h.backend.namespaces().await.unwrap(),
        vec!["_meta".to_string(), "token".to_string()]
    );
}

async fn unconflicted_batch_is_split(h: Harness) {
    setup(&h).await;
    // Not conflict-free (the coordinator would never send this): processed in order anyway.
    let out = h
        .engine
        .process(vec![
            tx("a", 1, 0, vec![ns("token", 0).rw("k", None, "a")]),
            tx("b", 1, 1, vec![ns("token", 0).rw("k", Some(0), "b")]),
            tx("c", 1, 2, vec![ns("token", 0).rw("k", Some(0), "c")]),
            tx("d", 1, 3, vec![ns("token", 0).blind("k", "d")]),
        ])
        .await
        .unwrap();
    assert_eq!(
        out.iter().map(|o| o.status).collect::<Vec<_>>(),
        vec![Committed, Committed, AbortedMvccConflict, Committed]
    );
    assert_eq!(
        state(&h.backend, "token").await,
        vec![("k".into(), "d".into(), 2)]
    );
}

/// Random batches with high conflict rates, several namespaces, blind writes, `_meta`
/// updates and resubmissions: statuses and final state equal the serial oracle's.
async fn random_workloads_match_serial_oracle(h: Harness) {
    let mut oracle = Oracle::default();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0xfab);
    let names = ["alpha", "beta"];
    let mut batches = vec![vec![
        meta("c_alpha", 0, 0, "alpha", None),
        meta("c_beta", 0, 1, "beta", None),
    ]];
    for block in 1..40u64 {
        let mut batch = Vec::new();
        for i in 0..rng.gen_range(1..12u32) {
            let mut spaces = Vec::new();
            for name in names {
                if rng.gen_bool(0.6) || spaces.is_empty() && name == "beta" {
                    let mut n = ns(name, rng.gen_range(0..2));
                    for k in 0..rng.gen_range(0..3) {
                        let key = format!("k{}", rng.gen_range(0..6) * 3 + k);
                        let version = if rng.gen_bool(0.3) {
                            None
                        } else {
                            Some(rng.gen_range(0..3))
                        };
                        if rng.gen_bool(0.5) {
                            n = n.rw(&key, version, &format!("{block}.{i}"));
                        } else {
                            n = n.read(&key, version);
                        }
                    }
                    if rng.gen_bool(0.5) || n.0.read_writes.is_empty() {
                        n = n.blind(&format!("b{}", rng.gen_range(0..4)), &format!("{block}.{i}"));
                    }
                    spaces.push(n);
                }
            }
            // Keys may repeat inside a namespace by chance: keep one occurrence so the tx
            // stays well formed.
            for n in &mut spaces {
                let mut seen = std::collections::HashSet::new();
                n.0.reads_only.retain(|r| seen.insert(r.key.clone()));
                n.0.read_writes.retain(|r| seen.insert(r.key.clone()));
                n.0.blind_writes.retain(|r| seen.insert(r.key.clone()));
            }
            batch.push(tx(&format!("t{block}_{i}"), block, i, spaces));
        }
        if rng.gen_bool(0.1) {
            let from = oracle
                .rows
                .get(&("_meta".to_string(), b"alpha".to_vec()))
                .map(|r| r.1);
            batch.push(meta(&format!("m{block}"), block, 99, "alpha", from));
        }
        batches.push(batch);
    }
    for (i, batch) in batches.iter().enumerate() {
        let want: Vec<Status> = batch.iter().map(|t| oracle.apply(t)).collect();
        let got = h.engine.process(batch.clone()).await.unwrap();
        assert_eq!(
            got.iter().map(|o| o.status).collect::<Vec<_>>(),
            want,
            "batch {i}"
        );
        if i % 7 == 3 {
            // Resubmit an earlier batch: same answers, nothing changes.
            let again = h.engine.process(batches[i - 1].clone()).await.unwrap();
            let first: Vec<Status> = batches[i - 1].iter().map(|t| oracle.apply(t)).collect();
            assert_eq!(again.iter().map(|o| o.status).collect::<Vec<_>>(), first);
        }
    }
    for name in names.iter().chain(["_meta"].iter()) {
        let got: Vec<(Vec<u8>, Vec<u8>, u64)> = h
            .backend
            .scan(name)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.key, r.value, r.version))
            .collect();
        let want: Vec<(Vec<u8>, Vec<u8>, u64)> = oracle
            .rows
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|((_, k), (v, ver))| (k.clone(), v.clone(), *ver))
            .collect();
        assert_eq!(got, want, "namespace {name}");
    }
    let committed = oracle.stored.values().filter(|s| s.0 == Committed).count();
    assert!(committed > 40, "workload too easy: {committed} committed");
    assert!(
        oracle.stored.values().any(|s| s.0 == AbortedMvccConflict),
        "workload has no conflicts"
    );
    let _ = Arc::clone(&h.backend);
}
