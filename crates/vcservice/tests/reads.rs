//! Reads of committed state and the owner index, run against both backends: rows read
//! back at one snapshot, the owner index following inserts, updates, spends and blind
//! writes, paging, and the SQL owner expression matching `types::owned::owner_of`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

use common::*;
use std::sync::Arc;
use types::Status::*;
use types::owned::{OWNED_MAGIC, OWNER_LEN, owner_of};
use vcservice::{
    Backend, Durability, EmbeddedBackend, Error, OwnedPage, PgBackend, PgOptions, Row, Snapshot,
};

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
    rows_read_back_at_one_snapshot,
    owner_index_follows_writes,
    owner_expression_matches_owner_of,
    owned_rows_are_paged,
    byte_budget_cuts_answers,
    invalid_namespace_is_an_error,
);

const BIG: usize = usize::MAX;

fn owner(o: u8) -> Vec<u8> {
    vec![o; OWNER_LEN]
}

/// An owned value: magic, owner, then `tag`.
fn owned(o: u8, tag: &str) -> Vec<u8> {
    let mut v = OWNED_MAGIC.to_vec();
    v.extend_from_slice(&owner(o));
    v.extend_from_slice(tag.as_bytes());
    v
}

fn page(after: &str, limit: usize) -> OwnedPage {
    OwnedPage {
        after_key: after.as_bytes().to_vec(),
        limit,
        max_bytes: BIG,
    }
}

async fn setup(h: &Harness, names: &[&str]) {
    let txs = names
        .iter()
        .enumerate()
        .map(|(i, n)| meta(&format!("create_{n}"), 0, i as u32, n, None))
        .collect();
    let out = h.engine.process(txs).await.unwrap();
    assert!(out.iter().all(|o| o.status == Committed), "{out:?}");
}

/// Commits one tx per namespace builder, each in its own block, asserting it commits.
async fn commit(h: &Harness, id: &str, block: u64, n: Ns) {
    let out = h.engine.process(vec![tx(id, block, 0, vec![n])]).await.unwrap();
    assert_eq!(statuses(&out), vec![(id.to_string(), Committed)]);
}

/// The keys (as strings) of an owner's rows in `ns`, read with one large page.
async fn owned_keys(b: &Arc<dyn Backend>, ns: &str, o: u8) -> Vec<String> {
    let s = b.owned_rows(ns, &owner(o), &page("", 10_000)).await.unwrap();
    assert!(!s.more);
    for r in &s.rows {
        assert_eq!(owner_of(&r.value), Some(owner(o).as_slice()), "row {r:?}");
    }
    keys_of(&s)
}

fn strings(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

fn keys_of(s: &Snapshot) -> Vec<String> {
    s.rows
        .iter()
        .map(|r| String::from_utf8_lossy(&r.key).into_owned())
        .collect()
}

async fn rows_read_back_at_one_snapshot(h: Harness) {
    setup(&h, &["token"]).await;
    commit(
        &h,
        "a",
        1,
        ns("token", 0).rw("k1", None, "v1").rw("k2", None, "v2"),
    )
    .await;
    commit(
        &h,
        "b",
        2,
        ns("token", 0).rw("k1", Some(0), "v1b").blind("k3", "v3"),
    )
    .await;
    let b = &h.backend;
    // Nothing recorded yet: no last committed block.
    let s = b.read_rows("token", &[b"k1".to_vec()], BIG).await.unwrap();
    assert_eq!(s.last_committed_block, None);
    b.set_last_committed_block(2).await.unwrap();
    let keys: Vec<Vec<u8>> = ["k3", "missing", "k1", "k1"]
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .collect();
    let s = b.read_rows("token", &keys, BIG).await.unwrap();
    assert_eq!(
        s,
        Snapshot {
            rows: vec![
                Row {
                    key: b"k1".to_vec(),
                    value: b"v1b".to_vec(),
                    version: 1
                },
                Row {
                    key: b"k3".to_vec(),
                    value: b"v3".to_vec(),
                    version: 0
                },
            ],
            more: false,
            last_committed_block: Some(2),
        }
    );
    // A namespace that does not exist has no rows, and still reports the block.
    let s = b.read_rows("nothere", &keys, BIG).await.unwrap();
    assert_eq!(
        (s.rows.len(), s.more, s.last_committed_block),
        (0, false, Some(2))
    );
    // `_meta` reads like any namespace.
    let s = b.read_rows("_meta", &[b"token".to_vec()], BIG).await.unwrap();
    assert_eq!(
        (keys_of(&s), s.rows[0].value.clone()),
        (vec!["token".to_string()], policy_value())
    );
    let s = b.read_rows("token", &[], BIG).await.unwrap();
    assert!(s.rows.is_empty() && !s.more);
}

async fn owner_index_follows_writes(h: Harness) {
    setup(&h, &["token", "coin"]).await;
    let b = &h.backend;
    commit(
        &h,
        "issue",
        1,
        ns("token", 0)
            .rw_bytes("t1", None, owned(1, "a"))
            .rw_bytes("t2", None, owned(1, "b"))
            .rw_bytes("t3", None, owned(2, "c"))
            .rw("t4", None, "plain"),
    )
    .await;
    // Same owner in another namespace: never in `token`'s index.
    commit(&h, "other", 2, ns("coin", 0).rw_bytes("t9", None, owned(1, "z"))).await;
    assert_eq!(owned_keys(b, "token", 1).await, ["t1", "t2"]);
    assert_eq!(owned_keys(b, "token", 2).await, ["t3"]);
    assert_eq!(owned_keys(b, "coin", 1).await, ["t9"]);
    assert!(owned_keys(b, "token", 3).await.is_empty());

    // Update to another owner.
    commit(
        &h,
        "transfer",
        3,
        ns("token", 0).rw_bytes("t1", Some(0), owned(2, "a2")),
    )
    .await;
    assert_eq!(owned_keys(b, "token", 1).await, ["t2"]);
    assert_eq!(owned_keys(b, "token", 2).await, ["t1", "t3"]);

    // Update to a value that is not owned: spent, in no index.
    commit(&h, "spend", 4, ns("token", 0).rw("t2", Some(0), "spent")).await;
    assert!(owned_keys(b, "token", 1).await.is_empty());

    // Blind writes: an existing plain key becomes owned, a new key, and an owned key
    // rewritten for the same owner (one entry, the new value).
    commit(
        &h,
        "blind",
        5,
        ns("token", 0)
            .blind_bytes("t4", owned(1, "d"))
            .blind_bytes("t5", owned(1, "e"))
            .blind_bytes("t3", owned(2, "c2")),
    )
    .await;
    assert_eq!(owned_keys(b, "token", 1).await, ["t4", "t5"]);
    let s = b.owned_rows("token", &owner(2), &page("", 100)).await.unwrap();
    assert_eq!(
        s.rows
            .iter()
            .map(|r| (r.key.clone(), r.value.clone(), r.version))
            .collect::<Vec<_>>(),
        vec![
            (b"t1".to_vec(), owned(2, "a2"), 1),
            (b"t3".to_vec(), owned(2, "c2"), 1),
        ]
    );
    // A blind write that spends (the owned value replaced by a plain one).
    commit(&h, "blind_spend", 6, ns("token", 0).blind("t5", "gone")).await;
    assert_eq!(owned_keys(b, "token", 1).await, ["t4"]);
    // An aborted tx changes no index entry.
    let out = h
        .engine
        .process(vec![tx(
            "stale",
            7,
            0,
            vec![ns("token", 0).rw_bytes("t4", None, owned(3, "x"))],
        )])
        .await
        .unwrap();
    assert_eq!(out[0].status, AbortedMvccConflict);
    assert_eq!(owned_keys(b, "token", 1).await, ["t4"]);
    assert!(owned_keys(b, "token", 3).await.is_empty());
    // An owner of the wrong length owns nothing (no prefix match on shorter owners).
    let s = b.owned_rows("token", &[1u8; 4], &page("", 100)).await.unwrap();
    assert!(s.rows.is_empty() && !s.more);
}

/// Values around the owned format's edges, by key.
fn expression_cases() -> Vec<(&'static str, Vec<u8>)> {
    let mut exact = OWNED_MAGIC.to_vec();
    exact.extend_from_slice(&owner(1));
    let mut wrong_magic = b"fxtk2".to_vec();
    wrong_magic.extend_from_slice(&owner(1));
    let mut upper_magic = b"FXTK1".to_vec();
    upper_magic.extend_from_slice(&owner(1));
    let mut shifted = b"xfxtk1".to_vec();
    shifted.extend_from_slice(&owner(1));
    vec![
        ("exact37", exact.clone()),
        ("short36", exact[..exact.len() - 1].to_vec()),
        ("magic_only", OWNED_MAGIC.to_vec()),
        ("wrong_magic", wrong_magic),
        ("upper_magic", upper_magic),
        ("shifted", shifted),
        ("longer", owned(1, "and more bytes \u{0}\u{ff}")),
        ("other_owner", owned(2, "")),
        ("empty", vec![]),
        ("nul_owner", owned(0, "")),
    ]
}

/// Commits every case of [`expression_cases`] in `token`.
async fn commit_cases(e: &vcservice::Engine) {
    let mut n = ns("token", 0);
    for (k, v) in expression_cases() {
        n = n.rw_bytes(k, None, v);
    }
    for t in [meta("create", 0, 0, "token", None), tx("all", 1, 0, vec![n])] {
        assert_eq!(e.process(vec![t]).await.unwrap()[0].status, Committed);
    }
}

async fn owner_expression_matches_owner_of(h: Harness) {
    let values = expression_cases();
    commit_cases(&h.engine).await;
    for o in [0u8, 1, 2] {
        let mut want: Vec<String> = values
            .iter()
            .filter(|(_, v)| owner_of(v) == Some(owner(o).as_slice()))
            .map(|(k, _)| k.to_string())
            .collect();
        want.sort();
        assert_eq!(owned_keys(&h.backend, "token", o).await, want, "owner {o}");
    }
    assert_eq!(owned_keys(&h.backend, "token", 1).await, ["exact37", "longer"]);
}

async fn owned_rows_are_paged(h: Harness) {
    setup(&h, &["token"]).await;
    let mut n = ns("token", 0);
    for i in 0..25 {
        n = n.rw_bytes(&format!("k{i:02}"), None, owned(1, "x")).rw_bytes(
            &format!("k{i:02}b"),
            None,
            owned(2, "y"),
        );
    }
    commit(&h, "issue", 1, n).await;
    let b = &h.backend;
    let mut after = String::new();
    let mut pages = Vec::new();
    loop {
        let s = b.owned_rows("token", &owner(1), &page(&after, 10)).await.unwrap();
        pages.push((keys_of(&s).len(), s.more));
        after = keys_of(&s).last().cloned().unwrap_or_default();
        if !s.more {
            break;
        }
    }
    assert_eq!(pages, vec![(10, true), (10, true), (5, false)]);
    // A page of exactly the rows left has no `more`.
    let s = b.owned_rows("token", &owner(1), &page("k19", 5)).await.unwrap();
    assert_eq!(
        (keys_of(&s), s.more),
        (strings(&["k20", "k21", "k22", "k23", "k24"]), false)
    );
    // `after_key` need not be a key of the owner, nor stored at all.
    let s = b.owned_rows("token", &owner(1), &page("k03b", 2)).await.unwrap();
    assert_eq!(
        (keys_of(&s), s.more),
        (vec!["k04".to_string(), "k05".to_string()], true)
    );
    let s = b.owned_rows("token", &owner(1), &page("k24", 10)).await.unwrap();
    assert_eq!((s.rows.len(), s.more), (0, false));
    // Limit 0: no rows, and `more` says some exist.
    let s = b.owned_rows("token", &owner(1), &page("", 0)).await.unwrap();
    assert_eq!((s.rows.len(), s.more), (0, true));
}

async fn byte_budget_cuts_answers(h: Harness) {
    setup(&h, &["token"]).await;
    let mut n = ns("token", 0);
    for i in 0..6 {
        n = n.rw_bytes(&format!("k{i}"), None, owned(1, "0123456789"));
    }
    commit(&h, "issue", 1, n).await;
    let b = &h.backend;
    let row = 2 + owned(1, "0123456789").len();
    let keys: Vec<Vec<u8>> = (0..6).map(|i| format!("k{i}").into_bytes()).collect();
    // Three rows fit exactly; the fourth would not.
    let s = b.read_rows("token", &keys, 3 * row).await.unwrap();
    assert_eq!(
        (keys_of(&s), s.more),
        (vec!["k0".into(), "k1".into(), "k2".into()], true)
    );
    let s = b.read_rows("token", &keys, 3 * row + row - 1).await.unwrap();
    assert_eq!((s.rows.len(), s.more), (3, true));
    // The first row is always taken, however small the budget.
    let s = b.read_rows("token", &keys[3..], 1).await.unwrap();
    assert_eq!((keys_of(&s), s.more), (vec!["k3".into()], true));
    let s = b.read_rows("token", &keys, 6 * row).await.unwrap();
    assert_eq!((s.rows.len(), s.more), (6, false));
    let p = OwnedPage {
        after_key: b"k1".to_vec(),
        limit: 100,
        max_bytes: 2 * row,
    };
    let s = b.owned_rows("token", &owner(1), &p).await.unwrap();
    assert_eq!((keys_of(&s), s.more), (vec!["k2".into(), "k3".into()], true));
    // The row limit cuts before the budget does.
    let p = OwnedPage { limit: 1, ..p };
    let s = b.owned_rows("token", &owner(1), &p).await.unwrap();
    assert_eq!((keys_of(&s), s.more), (vec!["k2".into()], true));
}

async fn invalid_namespace_is_an_error(h: Harness) {
    setup(&h, &["token"]).await;
    let b = &h.backend;
    for bad in [
        "",
        "Token",
        "tok-en",
        "a b",
        "x;drop table tx_status",
        &"a".repeat(61),
    ] {
        match b.read_rows(bad, &[b"k".to_vec()], BIG).await {
            Err(Error::InvalidNamespace { ns }) => assert_eq!(ns, bad),
            other => panic!("{bad:?}: {other:?}"),
        }
        match b.owned_rows(bad, &owner(1), &page("", 1)).await {
            Err(Error::InvalidNamespace { ns }) => assert_eq!(ns, bad),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

fn issue_batch() -> Vec<vcservice::VcTx> {
    vec![
        meta("create", 0, 0, "token", None),
        tx(
            "issue",
            1,
            0,
            vec![
                ns("token", 0)
                    .rw_bytes("t1", None, owned(1, "a"))
                    .rw_bytes("t2", None, owned(2, "b"))
                    .rw_bytes("t3", None, owned(1, "c")),
            ],
        ),
    ]
}

/// The index is written with the rows: after the store is closed and reopened (as after
/// a crash: nothing else is flushed on close), it answers the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_index_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let b: Arc<dyn Backend> =
            Arc::new(EmbeddedBackend::open(dir.path(), Durability::SyncEachCommit).unwrap());
        b.init_schema().await.unwrap();
        let e = vcservice::Engine::new(
            b.clone(),
            Default::default(),
            vcservice::metrics::Metrics::unexported().unwrap(),
        );
        for t in issue_batch() {
            assert_eq!(e.process(vec![t]).await.unwrap()[0].status, Committed);
        }
        let out = e
            .process(vec![tx(
                "move",
                2,
                0,
                vec![ns("token", 0).rw_bytes("t1", Some(0), owned(2, "a"))],
            )])
            .await
            .unwrap();
        assert_eq!(out[0].status, Committed);
    }
    let b: Arc<dyn Backend> =
        Arc::new(EmbeddedBackend::open(dir.path(), Durability::SyncEachCommit).unwrap());
    b.init_schema().await.unwrap();
    assert_eq!(owned_keys(&b, "token", 1).await, ["t3"]);
    assert_eq!(owned_keys(&b, "token", 2).await, ["t1", "t2"]);
}

/// A store written before the index existed (rows, no `o` entries, no marker) gets its
/// index built by `init_schema`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_index_is_built_for_an_older_store() {
    let dir = tempfile::tempdir().unwrap();
    {
        let b: Arc<dyn Backend> = Arc::new(EmbeddedBackend::open(dir.path(), Durability::NoSync).unwrap());
        let e = vcservice::Engine::new(
            b.clone(),
            Default::default(),
            vcservice::metrics::Metrics::unexported().unwrap(),
        );
        for t in issue_batch() {
            assert_eq!(e.process(vec![t]).await.unwrap()[0].status, Committed);
        }
    }
    {
        // Strip the index and the marker, as a store of the previous layout.
        let db = rocksdb::DB::open_default(dir.path()).unwrap();
        let index: Vec<Box<[u8]>> = db
            .prefix_iterator(b"o")
            .map(|i| i.unwrap().0)
            .take_while(|k| k.starts_with(b"o"))
            .collect();
        assert_eq!(index.len(), 3, "one entry per owned row");
        for k in index {
            db.delete(k).unwrap();
        }
        db.delete(b"mowner_index_v1").unwrap();
    }
    let b: Arc<dyn Backend> = Arc::new(EmbeddedBackend::open(dir.path(), Durability::NoSync).unwrap());
    assert!(owned_keys(&b, "token", 1).await.is_empty());
    b.init_schema().await.unwrap();
    assert_eq!(owned_keys(&b, "token", 1).await, ["t1", "t3"]);
    assert_eq!(owned_keys(&b, "token", 2).await, ["t2"]);
}

/// Tables of an older schema (no `owner` column) get the column and the index when a
/// vcservice starts, with the owners of the rows already stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tables_of_an_older_schema_are_upgraded() {
    let url = testkit::pg::cluster().fresh_database("reads").await;
    let b: Arc<dyn Backend> = Arc::new(PgBackend::connect(&PgOptions::new(url.clone())).unwrap());
    b.init_schema().await.unwrap();
    let e = vcservice::Engine::new(
        b.clone(),
        Default::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    for t in issue_batch() {
        assert_eq!(e.process(vec![t]).await.unwrap()[0].status, Committed);
    }
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query("ALTER TABLE ns_token DROP COLUMN owner")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("ALTER TABLE ns__meta DROP COLUMN owner")
        .execute(&pool)
        .await
        .unwrap();
    let fresh: Arc<dyn Backend> = Arc::new(PgBackend::connect(&PgOptions::new(url.clone())).unwrap());
    fresh.init_schema().await.unwrap();
    fresh.init_schema().await.unwrap(); // idempotent
    assert_eq!(owned_keys(&fresh, "token", 1).await, ["t1", "t3"]);
    let indexes: Vec<String> =
        sqlx::query_scalar("SELECT indexname::TEXT FROM pg_indexes WHERE tablename = 'ns_token' ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(indexes, ["ns_token_pkey", "o_token"]);
    // Writes after the upgrade keep the index.
    let e = vcservice::Engine::new(
        fresh.clone(),
        Default::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    let out = e
        .process(vec![tx(
            "move",
            2,
            0,
            vec![ns("token", 0).rw_bytes("t1", Some(0), owned(2, "a"))],
        )])
        .await
        .unwrap();
    assert_eq!(out[0].status, Committed);
    assert_eq!(owned_keys(&fresh, "token", 1).await, ["t3"]);
    assert_eq!(owned_keys(&fresh, "token", 2).await, ["t1", "t2"]);
}

/// The query plan of an owner's page uses the owner index (no scan of the table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_owned_rows_use_the_index() {
    let url = testkit::pg::cluster().fresh_database("reads").await;
    let b: Arc<dyn Backend> = Arc::new(PgBackend::connect(&PgOptions::new(url.clone())).unwrap());
    b.init_schema().await.unwrap();
    let e = vcservice::Engine::new(
        b.clone(),
        Default::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    for t in issue_batch() {
        assert_eq!(e.process(vec![t]).await.unwrap()[0].status, Committed);
    }
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT key FROM ns_token WHERE owner = $1 AND key > $2 ORDER BY key LIMIT 10",
    )
    .bind(owner(1))
    .bind(Vec::<u8>::new())
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    assert!(plan.iter().any(|l| l.contains("o_token")), "{plan:#?}");
}

/// The generated `owner` column itself equals `owner_of` for every case, including the
/// ones no 32-byte owner query could tell apart (a 36-byte value must have no owner, not
/// a 31-byte one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_owner_column_is_owner_of() {
    let url = testkit::pg::cluster().fresh_database("reads").await;
    let b: Arc<dyn Backend> = Arc::new(PgBackend::connect(&PgOptions::new(url.clone())).unwrap());
    b.init_schema().await.unwrap();
    commit_cases(&vcservice::Engine::new(
        b,
        Default::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    ))
    .await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = sqlx::query_as("SELECT key, owner FROM ns_token ORDER BY key")
        .fetch_all(&pool)
        .await
        .unwrap();
    let mut want: Vec<(Vec<u8>, Option<Vec<u8>>)> = expression_cases()
        .into_iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), owner_of(&v).map(<[u8]>::to_vec)))
        .collect();
    want.sort();
    assert_eq!(got, want);
}
