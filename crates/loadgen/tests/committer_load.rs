//! Small committer loads through the real pipeline on both backends, with double spends
//! and bad signatures: every status and the final state equal the serial oracle's, and
//! the counts equal what the planner meant.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use loadgen::committer::{self, LoadRun, RunInfo};
use loadgen::{Scheme, Workload, WorkloadSpec};
use sidecar::pipeline::PipelineConfig;
use std::sync::Arc;
use types::Status;
use vcservice::{Backend, Durability, EmbeddedBackend, Engine, EngineConfig, PgBackend, PgOptions};

fn spec(seed: u64, tag: &str) -> WorkloadSpec {
    WorkloadSpec {
        blocks: 12,
        block_size: 40,
        reads: 1,
        writes: 2,
        scheme: Scheme::Ed25519,
        conflict_rate: 0.2,
        invalid_sig_rate: 0.1,
        seed,
        tag: tag.into(),
        reuse_outputs: true,
        output_padding: 0,
    }
}

fn small_pipeline() -> PipelineConfig {
    let mut c = PipelineConfig {
        workers: std::num::NonZeroUsize::new(3).unwrap(),
        max_batch: std::num::NonZeroUsize::new(7).unwrap(),
        ..PipelineConfig::default()
    };
    c.graph.max_pending = 60; // back-pressure: a few blocks in flight at most
    c
}

async fn load(backend: Arc<dyn Backend>, spec: &WorkloadSpec) -> (Arc<Workload>, LoadRun) {
    let workload = Arc::new(Workload::generate(spec).unwrap());
    let engine = Engine::new(
        backend.clone(),
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    let mut emitted = 0;
    let run = committer::run(engine, &workload, small_pipeline(), &mut |p| {
        emitted += 1;
        assert_eq!(p.blocks, emitted);
    })
    .await
    .unwrap();
    assert_eq!(emitted, spec.blocks);
    (workload, run)
}

/// Runs a load and checks it against the oracle and the planner's intents.
async fn check(backend: Arc<dyn Backend>, spec: &WorkloadSpec) {
    let (workload, run) = load(backend.clone(), spec).await;
    let (statuses, state) = committer::verify_serial(&backend, workload.clone(), &run)
        .await
        .unwrap();
    assert_eq!(
        (statuses, state),
        (0, 0),
        "{spec:?}: differs from the serial oracle"
    );
    let info = RunInfo {
        backend: "test".into(),
        workers: 3,
        max_batch: 7,
        max_pending: 60,
        prebuild_seconds: 0.0,
    };
    let s = committer::summarize(&workload, &run, &info);
    let total = (spec.blocks * spec.block_size) as u64;
    assert_eq!(s.txs, total);
    assert_eq!(s.other, 0);
    // Every tx ends as the planner meant.
    for (b, (got, meant)) in run.statuses.iter().zip(&workload.intents).enumerate() {
        let want: Vec<Status> = meant.iter().map(|i| i.expected()).collect();
        assert_eq!(got, &want, "{spec:?}: block {b}");
    }
    let bad_sigs = workload
        .intents
        .iter()
        .flatten()
        .filter(|i| i.bad_signature)
        .count() as u64;
    let doubles_signed = workload
        .intents
        .iter()
        .flatten()
        .filter(|i| i.double_spend && !i.bad_signature)
        .count() as u64;
    assert_eq!(s.signature_invalid, bad_sigs, "{spec:?}");
    assert_eq!(s.mvcc_conflict, doubles_signed, "{spec:?}");
    assert_eq!(s.committed, total - bad_sigs - doubles_signed);
    assert!(
        bad_sigs > 0 && doubles_signed > 0 && s.committed > 0,
        "{spec:?}: {s:?}"
    );
    assert!(s.seconds > 0.0 && s.tps > 0.0 && s.p50_ms <= s.p99_ms, "{s:?}");
}

fn embedded() -> (tempfile::TempDir, Arc<dyn Backend>) {
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> = Arc::new(EmbeddedBackend::open(dir.path(), Durability::NoSync).unwrap());
    (dir, backend)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_loads_match_the_oracle() {
    for seed in 0..3 {
        let (_dir, backend) = embedded();
        check(backend, &spec(seed, &format!("e{seed}"))).await;
    }
    // More reads than writes (reference keys) and more writes than reads (new coins).
    for (reads, writes) in [(3, 2), (2, 4)] {
        let (_dir, backend) = embedded();
        check(
            backend,
            &WorkloadSpec {
                reads,
                writes,
                ..spec(7, "shape")
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_schemes_match_the_oracle() {
    for scheme in [Scheme::EcdsaP256, Scheme::BlsThreshold] {
        let (_dir, backend) = embedded();
        let s = WorkloadSpec {
            blocks: 6,
            block_size: 25,
            scheme,
            conflict_rate: 0.3,
            invalid_sig_rate: 0.2,
            ..spec(3, "sch")
        };
        check(backend, &s).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_loads_match_the_oracle_and_reruns_need_a_fresh_tag() {
    let url = testkit::pg::cluster().fresh_database("loadgen").await;
    let backend: Arc<dyn Backend> = Arc::new(PgBackend::connect(&PgOptions::new(url)).unwrap());
    backend.init_schema().await.unwrap();
    // Two runs in one database with different tags do not collide.
    check(backend.clone(), &spec(11, "pga")).await;
    check(backend.clone(), &spec(12, "pgb")).await;
    // The same tag again is refused at genesis with a clear error.
    let workload = Workload::generate(&spec(11, "pga")).unwrap();
    let engine = Engine::new(
        backend,
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    let err = match committer::run(engine, &workload, small_pipeline(), &mut |_| {}).await {
        Ok(_) => panic!("a reused tag was accepted"),
        Err(e) => e,
    };
    assert!(matches!(err, loadgen::Error::NamespaceExists { .. }), "{err}");
    assert!(err.to_string().contains("--tag"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oracle_catches_a_tampered_run() {
    let (_dir, backend) = embedded();
    let (workload, mut run) = load(backend.clone(), &spec(5, "tamper")).await;
    run.statuses[3][1] = Status::AbortedMvccConflict;
    run.statuses[7].pop();
    let (statuses, state) = committer::verify_serial(&backend, workload.clone(), &run)
        .await
        .unwrap();
    let flipped = u64::from(workload.intents[3][1].expected() != Status::AbortedMvccConflict);
    assert_eq!(statuses, flipped + 1);
    assert_eq!(state, 0);
    // A row changed behind the committer's back is a state mismatch.
    let ns = workload.spec.namespace();
    let rows = backend.scan(&ns).await.unwrap();
    let oracle = committer::oracle(&workload).unwrap();
    assert_eq!(rows.len(), oracle.rows.len());
    let mut fewer = oracle;
    fewer.rows.remove(0);
    assert_eq!(
        committer::state_mismatches(&backend, &workload, &fewer)
            .await
            .unwrap(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baselines_measure_something() {
    let (_dir, backend) = embedded();
    let s = spec(9, "base");
    let workload = Arc::new(Workload::generate(&s).unwrap());
    let rates = loadgen::baseline::verify_rates(&workload, 100).unwrap();
    assert_eq!(rates.sample, 100);
    assert!(rates.one_core_per_s > 0.0 && rates.all_cores_per_s > 0.0 && rates.cores >= 1);
    let engine = Engine::new(
        backend,
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    let serial = loadgen::baseline::serial_commit(engine, workload.clone(), 150)
        .await
        .unwrap();
    assert_eq!(serial.txs, 150);
    let meant = workload
        .intents
        .iter()
        .flatten()
        .take(150)
        .filter(|i| i.expected() == Status::Committed)
        .count() as u64;
    assert_eq!(serial.committed, meant);
}

/// Unpaced, a tx's latency runs from its block's pull, not from the start of the run:
/// with one block in flight at a time, no block waits for the ones before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpaced_latency_runs_from_the_pull() {
    let (_dir, backend) = embedded();
    let spec = WorkloadSpec {
        blocks: 30,
        conflict_rate: 0.0,
        invalid_sig_rate: 0.0,
        ..spec(11, "pull")
    };
    let workload = Arc::new(Workload::generate(&spec).unwrap());
    let engine = Engine::new(
        backend,
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    let mut config = small_pipeline();
    config.graph.max_pending = 1; // one block at a time
    let run = committer::run(engine, &workload, config, &mut |_| {})
        .await
        .unwrap();
    let max_ms = run.latency_us.max() as f64 / 1000.0;
    let total_ms = run.seconds * 1000.0;
    // From the start, the last block's latency would be the whole run; from its pull,
    // about a thirtieth of it.
    assert!(
        max_ms < total_ms / 3.0,
        "slowest block {max_ms:.1} ms of a {total_ms:.1} ms run"
    );
}
