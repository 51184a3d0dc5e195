use super::*;
use crate::model::NsWrites;
use std::sync::Arc;
use types::{Height, ReadWrite, Tx, TxId, TxNamespace, Write};

fn rw(key: &str, version: Option<u64>) -> ReadWrite {
    ReadWrite {
        key: key.into(),
        version,
        value: format!("v-{key}").into_bytes(),
    }
}

fn tx(id: &str, block: u64, ns: &str, rws: Vec<ReadWrite>, blind: Vec<&str>) -> VcTx {
    let namespace = TxNamespace {
        ns_id: ns.into(),
        ns_version: 0,
        read_writes: rws,
        blind_writes: blind
            .into_iter()
            .map(|k| Write {
                key: k.into(),
                value: b"b".to_vec(),
            })
            .collect(),
        ..Default::default()
    };
    VcTx {
        id: TxId(id.into()),
        height: Height::new(block, 0),
        tx: Arc::new(Tx {
            namespaces: vec![namespace],
            ..Default::default()
        }),
        prelim: None,
    }
}

fn ids(chunks: &[Vec<VcTx>]) -> Vec<Vec<&str>> {
    chunks
        .iter()
        .map(|c| c.iter().map(|t| t.id.as_str()).collect())
        .collect()
}

#[test]
fn split_keeps_order_and_separates_conflicts() {
    let batch = vec![
        tx("a", 0, "token", vec![rw("k1", Some(0))], vec![]),
        tx("b", 0, "token", vec![rw("k2", None)], vec![]),
        tx("c", 0, "token", vec![rw("k1", Some(1))], vec![]), // ww/rw with a
        tx("d", 0, "token", vec![], vec!["k3"]),
        tx("e", 0, "token", vec![], vec!["k3"]),           // ww with d
        tx("e", 1, "token", vec![], vec!["k9"]),           // same id as previous
        tx("f", 0, "other", vec![rw("k1", None)], vec![]), // same key, other namespace
    ];
    let chunks = split_conflict_free(batch);
    assert_eq!(
        ids(&chunks),
        vec![vec!["a", "b"], vec!["c", "d"], vec!["e"], vec!["e", "f"]]
    );
}

#[test]
fn namespace_creation_and_use_are_split() {
    let create = tx("create", 0, META_NAMESPACE, vec![rw("token", None)], vec![]);
    let user = tx("use", 0, "token", vec![], vec!["k"]);
    assert_eq!(
        ids(&split_conflict_free(vec![create, user])),
        vec![vec!["create"], vec!["use"]]
    );
}

#[test]
fn classify_table() {
    let mut stored = StatusMap::new();
    stored.insert(TxId("seen".into()), (Status::Committed, Height::new(3, 0)));
    let mut prelim_sig = tx("sig", 3, "token", vec![], vec!["k"]);
    prelim_sig.prelim = Some(Status::AbortedSignatureInvalid);
    let mut prelim_dup = tx("dup", 3, "token", vec![], vec!["k"]);
    prelim_dup.prelim = Some(Status::RejectedDuplicateTxId);
    let rows: Vec<(VcTx, Disposition)> = vec![
        (
            tx("seen", 3, "token", vec![], vec!["k"]),
            Disposition::Answered(TxOutcome {
                id: TxId("seen".into()),
                status: Status::Committed,
                height: Height::new(3, 0),
            }),
        ),
        (
            tx("seen", 4, "token", vec![], vec!["k"]),
            Disposition::Answered(TxOutcome {
                id: TxId("seen".into()),
                status: Status::RejectedDuplicateTxId,
                height: Height::new(4, 0),
            }),
        ),
        (
            prelim_sig,
            Disposition::StorePrelim(Status::AbortedSignatureInvalid),
        ),
        (
            prelim_dup,
            Disposition::Answered(TxOutcome {
                id: TxId("dup".into()),
                status: Status::RejectedDuplicateTxId,
                height: Height::new(3, 0),
            }),
        ),
        (tx("new", 3, "token", vec![], vec!["k"]), Disposition::Validate),
    ];
    for (vtx, want) in rows {
        assert_eq!(
            classify(std::slice::from_ref(&vtx), &stored),
            vec![want],
            "tx {}",
            vtx.id
        );
    }
}

#[test]
fn decide_validates_reads_including_the_namespace_version() {
    let chunk = vec![
        tx(
            "ok",
            1,
            "token",
            vec![rw("k1", Some(4)), rw("new", None)],
            vec!["b"],
        ),
        tx("stale", 1, "token", vec![rw("k2", Some(0))], vec![]),
        tx("exists", 1, "token", vec![rw("k3", None)], vec![]),
        tx("unknown_ns", 1, "nope", vec![rw("k", None)], vec![]),
    ];
    let disp = vec![Disposition::Validate; chunk.len()];
    let rs = read_set(&chunk, &disp);
    assert_eq!(rs["_meta"], vec![b"nope".to_vec(), b"token".to_vec()]);
    assert_eq!(rs["token"].len(), 4);
    let mut versions = VersionMap::new();
    versions.insert(("_meta".into(), b"token".to_vec()), 0);
    versions.insert(("token".into(), b"k1".to_vec()), 4);
    versions.insert(("token".into(), b"k2".to_vec()), 1);
    versions.insert(("token".into(), b"k3".to_vec()), 0);
    let (set, outcomes) = decide(&chunk, &disp, &versions);
    let statuses: Vec<_> = outcomes.iter().map(|o| (o.id.as_str(), o.status)).collect();
    assert_eq!(
        statuses,
        vec![
            ("ok", Status::Committed),
            ("stale", Status::AbortedMvccConflict),
            ("exists", Status::AbortedMvccConflict),
            ("unknown_ns", Status::AbortedMvccConflict),
        ]
    );
    assert_eq!(set.statuses.len(), 4);
    assert_eq!(
        set.writes["token"],
        NsWrites {
            inserts: vec![(b"new".to_vec(), b"v-new".to_vec())],
            updates: vec![(b"k1".to_vec(), b"v-k1".to_vec(), 4)],
            upserts: vec![(b"b".to_vec(), b"b".to_vec())],
        }
    );
    assert!(set.new_namespaces.is_empty());
}

#[test]
fn meta_insert_creates_namespace() {
    let chunk = vec![tx("create", 0, META_NAMESPACE, vec![rw("token", None)], vec![])];
    let disp = vec![Disposition::Validate];
    // `_meta` txs carry no implicit read of themselves.
    assert_eq!(read_set(&chunk, &disp)["_meta"], vec![b"token".to_vec()]);
    let (set, outcomes) = decide(&chunk, &disp, &VersionMap::new());
    assert_eq!(outcomes[0].status, Status::Committed);
    assert_eq!(set.new_namespaces, vec!["token".to_string()]);
}

#[test]
fn unchecked_reads_leave_out_only_the_inserted_keys() {
    let mut read_only = tx("reads", 1, "token", vec![], vec![]);
    Arc::make_mut(&mut read_only.tx).namespaces[0].reads_only.extend([
        types::Read {
            key: b"r_absent".to_vec(),
            version: None,
        },
        types::Read {
            key: b"r0".to_vec(),
            version: Some(0),
        },
    ]);
    let chunk = vec![
        tx(
            "spend",
            1,
            "token",
            vec![rw("coin", Some(0)), rw("out1", None), rw("out2", None)],
            vec!["b"],
        ),
        read_only,
        tx("create", 1, META_NAMESPACE, vec![rw("other", None)], vec![]),
    ];
    let disp = vec![Disposition::Validate; chunk.len()];
    let rs = unchecked_read_set(&chunk, &disp);
    // The namespace versions, read-only keys (absent or not) and keys read at a version
    // stay; the keys inserted by read-writes that expect them absent go.
    assert_eq!(rs["_meta"], vec![b"token".to_vec()]);
    assert_eq!(
        rs["token"],
        vec![b"coin".to_vec(), b"r0".to_vec(), b"r_absent".to_vec()]
    );
    assert_eq!(rs.len(), 2);
    // Where the left-out keys are absent, the unchecked plan decides as the full one.
    let mut versions = VersionMap::new();
    versions.insert(("_meta".into(), b"token".to_vec()), 0);
    versions.insert(("token".into(), b"coin".to_vec()), 0);
    versions.insert(("token".into(), b"r0".to_vec()), 0);
    let (set, outcomes) = decide(&chunk, &disp, &versions);
    assert!(outcomes.iter().all(|o| o.status == Status::Committed));
    assert_eq!(set.writes["token"].inserts.len(), 2);
    // Skipped reads are only ever expected absent.
    let full = read_set(&chunk, &disp);
    for (ns, keys) in &full {
        for key in keys {
            let kept = rs.get(ns).is_some_and(|k| k.contains(key));
            let inserted = chunk.iter().any(|t| {
                t.tx.namespaces.iter().any(|n| {
                    &n.ns_id == ns
                        && n.read_writes
                            .iter()
                            .any(|rw| &rw.key == key && rw.version.is_none())
                })
            });
            assert!(kept || inserted, "{ns}/{key:?} left out but not inserted");
        }
    }
}
