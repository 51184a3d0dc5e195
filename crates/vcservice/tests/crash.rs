//! Crash and torn-write cases: a committed batch survives a process kill, a half-applied
//! batch is never visible, and a lost database connection during commit leaves nothing
//! half-written.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

use common::*;
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use types::{Status, TxId};
use vcservice::{Backend, Durability, EmbeddedBackend, Engine, EngineConfig, PgBackend, PgOptions, VcTx};

const TXS_PER_BATCH: u32 = 20;

fn batch(b: u64) -> Vec<VcTx> {
    (0..TXS_PER_BATCH)
        .map(|i| {
            tx(
                &format!("t{b}_{i}"),
                b,
                i,
                vec![ns("token", 0).rw(&format!("a{b}_{i}"), None, "v")],
            )
        })
        .collect()
}

/// Not a test on its own: the child process of `embedded_survives_kill_9`, which commits
/// batches forever and prints `ACK n` after each one returned.
#[tokio::test]
async fn crash_child() {
    let Ok(dir) = std::env::var("FABRX_CRASH_CHILD") else {
        return;
    };
    let backend: Arc<dyn Backend> =
        Arc::new(EmbeddedBackend::open(dir.as_ref(), Durability::SyncEachCommit).unwrap());
    let engine = Engine::new(
        backend,
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    engine
        .process(vec![meta("create", 0, 0, "token", None)])
        .await
        .unwrap();
    for b in 1.. {
        engine.process(batch(b)).await.unwrap();
        println!("ACK {b}");
    }
}

/// Every stored status has all its writes and every write has its status: no batch is
/// half applied. Returns the committed tx ids.
async fn check_atomic(backend: &Arc<dyn Backend>, upto: u64) -> HashSet<String> {
    let rows: HashSet<String> = state(backend, "token")
        .await
        .into_iter()
        .map(|(k, _, v)| {
            assert_eq!(v, 0);
            k
        })
        .collect();
    let mut committed = HashSet::new();
    for b in 1..=upto {
        let ids: Vec<TxId> = (0..TXS_PER_BATCH).map(|i| TxId(format!("t{b}_{i}"))).collect();
        let stored = backend.statuses(&ids).await.unwrap();
        assert!(
            stored.is_empty() || stored.len() == ids.len(),
            "batch {b} half stored: {} of {}",
            stored.len(),
            ids.len()
        );
        for i in 0..TXS_PER_BATCH {
            let has_row = rows.contains(&format!("a{b}_{i}"));
            let has_status = stored.contains_key(&TxId(format!("t{b}_{i}")));
            assert_eq!(
                has_row, has_status,
                "tx t{b}_{i}: row {has_row}, status {has_status}"
            );
            if has_status {
                committed.insert(format!("t{b}_{i}"));
            }
        }
    }
    assert_eq!(rows.len(), committed.len(), "rows without a status");
    committed
}

fn run_child_and_kill(dir: &std::path::Path, acks_wanted: u64) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "crash_child", "--nocapture", "--test-threads", "1"])
        .env("FABRX_CRASH_CHILD", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut last = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("ACK ") {
            last = n.trim().parse().unwrap();
            if last >= acks_wanted {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL, mid-stream
    child.wait().unwrap();
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_survives_kill_9() {
    for round in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let acked = run_child_and_kill(dir.path(), 5 + round * 7);
        let backend: Arc<dyn Backend> =
            Arc::new(EmbeddedBackend::open(dir.path(), Durability::SyncEachCommit).unwrap());
        let committed = check_atomic(&backend, acked + 50).await;
        // Every acknowledged batch is durable.
        for b in 1..=acked {
            for i in 0..TXS_PER_BATCH {
                assert!(committed.contains(&format!("t{b}_{i}")), "acked tx t{b}_{i} lost");
            }
        }
        // Resubmitting everything after the restart is idempotent.
        let engine = Engine::new(
            backend.clone(),
            EngineConfig::default(),
            vcservice::metrics::Metrics::unexported().unwrap(),
        );
        for b in 1..=acked + 2 {
            let out = engine.process(batch(b)).await.unwrap();
            assert!(
                out.iter().all(|o| o.status == Status::Committed),
                "batch {b}: {out:?}"
            );
        }
        // What the child committed after its last acknowledgement (it runs on until the
        // kill lands) stays; the resubmitted batches are all there, once.
        let mut want = committed;
        want.extend((1..=acked + 2).flat_map(|b| (0..TXS_PER_BATCH).map(move |i| format!("t{b}_{i}"))));
        assert_eq!(check_atomic(&backend, acked + 50).await, want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_torn_wal_tail_is_atomic() {
    let dir = tempfile::tempdir().unwrap();
    run_child_and_kill(dir.path(), 6);
    // Tear the end of the newest write-ahead log, as a crash in the middle of a write would.
    let mut logs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let wal = logs.pop().expect("a write-ahead log");
    let len = std::fs::metadata(&wal).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
    f.set_len(len.saturating_sub(37)).unwrap();
    drop(f);
    let backend: Arc<dyn Backend> =
        Arc::new(EmbeddedBackend::open(dir.path(), Durability::SyncEachCommit).unwrap());
    let committed = check_atomic(&backend, 60).await;
    assert!(
        !committed.is_empty(),
        "everything before the torn record is recovered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connection_killed_during_commit() {
    let url = testkit::pg::cluster().fresh_database("vccrash").await;
    let mut opts = PgOptions::new(url.clone());
    opts.pool_size = std::num::NonZeroU32::new(2).unwrap();
    let backend: Arc<dyn Backend> = Arc::new(PgBackend::connect(&opts).unwrap());
    backend.init_schema().await.unwrap();
    let cfg = EngineConfig {
        max_attempts: 500,
        initial_backoff: std::time::Duration::from_millis(2),
        max_backoff: std::time::Duration::from_millis(50),
    };
    let engine = Engine::new(
        backend.clone(),
        cfg,
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    engine
        .process(vec![meta("create", 0, 0, "token", None)])
        .await
        .unwrap();
    // A killer terminates every other connection to the database, over and over.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let kill_count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let killer = {
        let (stop, kill_count) = (stop.clone(), kill_count.clone());
        tokio::spawn(async move {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            let mut kills = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let n: Vec<bool> = sqlx::query_scalar(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .fetch_all(&mut conn)
                .await
                .unwrap();
                kills += n.iter().filter(|k| **k).count() as u64;
                kill_count.store(kills, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            }
            kills
        })
    };
    let mut oracle = Oracle::default();
    oracle.apply(&meta("create", 0, 0, "token", None));
    // At least 15 batches, and on until the killer has hit a few connections.
    let mut b = 0;
    while b < 15 || (kill_count.load(std::sync::atomic::Ordering::Relaxed) < 3 && b < 1000) {
        b += 1;
        let want: Vec<Status> = batch(b).iter().map(|t| oracle.apply(t)).collect();
        let got = engine
            .process(batch(b))
            .await
            .expect("retries outlast the killer");
        assert_eq!(got.iter().map(|o| o.status).collect::<Vec<_>>(), want);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let kills = killer.await.unwrap();
    assert!(kills >= 3, "the killer hit only {kills} connections");
    assert_eq!(
        check_atomic(&backend, b).await.len(),
        b as usize * TXS_PER_BATCH as usize
    );
}
