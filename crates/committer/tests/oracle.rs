//! The committer pipeline against a serial oracle: random workloads with high conflict
//! rates, multi-namespace txs, blind writes, bad signatures, duplicate ids, malformed txs
//! and `_meta` policy changes give exactly the statuses and final state of applying the
//! txs one by one in block order.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use committer::blockfile::{self, BlockFile};
use sidecar::pipeline::PipelineConfig;
use std::collections::BTreeMap;
use std::sync::Arc;
use testkit::oracle::{Rows, serial, workload};
use types::Status;
use vcservice::{Backend, Durability, EmbeddedBackend, Engine, EngineConfig, PgBackend, PgOptions};

async fn run_pipeline(
    backend: Arc<dyn Backend>,
    file: &BlockFile,
    workers: usize,
    max_batch: usize,
) -> Vec<Vec<Status>> {
    let engine = Engine::new(
        backend,
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    let mut config = PipelineConfig {
        workers: std::num::NonZeroUsize::new(workers).expect("workers > 0"),
        max_batch: std::num::NonZeroUsize::new(max_batch).expect("max_batch > 0"),
        ..PipelineConfig::default()
    };
    config.graph.max_pending = 16; // exercise back-pressure
    let mut pipeline = committer::in_process(engine, &file.meta_policy, config)
        .await
        .unwrap();
    let mut got = Vec::new();
    pipeline
        .run(file.blocks.clone(), |b| {
            assert_eq!(b.number as usize, got.len(), "blocks emitted in order");
            got.push(b.statuses.into_iter().map(|s| s.1).collect());
            Ok(())
        })
        .await
        .unwrap();
    got
}

async fn state(backend: &Arc<dyn Backend>) -> Rows {
    let mut out = BTreeMap::new();
    for ns in ["_meta", "alpha", "beta"] {
        for r in backend.scan(ns).await.unwrap() {
            out.insert((ns.to_string(), r.key), (r.value, r.version));
        }
    }
    out
}

async fn check(backend: Arc<dyn Backend>, seed: u64) {
    let file = blockfile::parse(&workload(seed, 25)).unwrap();
    let (want, want_rows) = serial(&file.meta_policy, &file.blocks).unwrap();
    let got = run_pipeline(backend.clone(), &file, 4, 5).await;
    assert_eq!(got, want, "seed {seed}: statuses differ from the serial oracle");
    assert_eq!(state(&backend).await, want_rows, "seed {seed}: state differs");
    let all: Vec<Status> = want.iter().flatten().copied().collect();
    for s in [
        Status::Committed,
        Status::AbortedMvccConflict,
        Status::AbortedSignatureInvalid,
    ] {
        assert!(all.contains(&s), "seed {seed}: workload never produced {s}");
    }
    // Re-running the same blocks changes nothing and answers the same.
    let again = run_pipeline(backend.clone(), &file, 2, 50).await;
    assert_eq!(again, want, "seed {seed}: re-run differs");
    assert_eq!(state(&backend).await, want_rows);
    assert_eq!(backend.last_committed_block().await.unwrap(), Some(24));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_matches_serial_oracle() {
    for seed in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        check(
            Arc::new(EmbeddedBackend::open(dir.path(), Durability::NoSync).unwrap()),
            seed,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_matches_serial_oracle() {
    for seed in 100..103 {
        let url = testkit::pg::cluster().fresh_database("pipe").await;
        let backend: Arc<dyn Backend> = Arc::new(PgBackend::connect(&PgOptions::new(url)).unwrap());
        backend.init_schema().await.unwrap();
        check(backend, seed).await;
    }
}

#[tokio::test]
async fn example_file_statuses() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/blocks.jsonl"
    ))
    .unwrap();
    let file = blockfile::parse(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> = Arc::new(EmbeddedBackend::open(dir.path(), Durability::NoSync).unwrap());
    let got = run_pipeline(backend, &file, 4, 3).await;
    assert_eq!(got, serial(&file.meta_policy, &file.blocks).unwrap().0);
    let codes: Vec<u32> = got.iter().flatten().map(|s| s.code()).collect();
    assert_eq!(
        codes,
        vec![
            1, 1, 1, 1, 1, 3, 2, 1, 102, 106, 107, 108, 111, 112, 110, 113, 109, 114, 100
        ]
    );
}

/// A failing `emit` (the sidecar node appends to its block store there) stops the
/// pipeline at once: the error comes back and no later block is emitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_emit_stops_the_pipeline() {
    let file = blockfile::parse(&workload(7, 12)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> = Arc::new(EmbeddedBackend::open(dir.path(), Durability::NoSync).unwrap());
    let engine = Engine::new(
        backend,
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    let mut pipeline = committer::in_process(engine, &file.meta_policy, PipelineConfig::default())
        .await
        .unwrap();
    let mut emitted = Vec::new();
    let err = pipeline
        .run(file.blocks.clone(), |b| {
            emitted.push(b.number);
            if b.number == 3 {
                return Err(sidecar::Error::StorePoisoned);
            }
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(matches!(err, sidecar::Error::StorePoisoned), "{err}");
    assert_eq!(
        emitted,
        vec![0, 1, 2, 3],
        "nothing after the failed block is emitted"
    );
}
