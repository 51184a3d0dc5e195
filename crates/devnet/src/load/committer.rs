//! `fabrx loadgen --target committer` (docs/loadgen.md): the in-process committer
//! pipeline with the load generator as its orderer, around `loadgen::committer`. It
//! opens the database (or a fresh embedded store), pre-builds and signs the workload,
//! runs it through the pipeline as the schedule paces it and sums it up; on request it
//! compares every status and the final state with the serial oracle and measures the
//! baselines (the signature-verify ceiling, a one-tx-at-a-time commit).

use super::{Error, Result};
use loadgen::baseline::{SerialRun, VerifyRates};
use loadgen::committer::{self, Progress, RunInfo};
use loadgen::series::{Schedule, Series};
use loadgen::summary::Baseline;
use loadgen::{Scheme, Summary, Workload, WorkloadSpec};
use sidecar::pipeline::PipelineConfig;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Instant;
use vcservice::config::{BackendOptions, DbTarget, open_backend};
use vcservice::{Backend, Engine, EngineConfig};

/// How to run the committer: the flags of `--target committer` besides the workload's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `embedded:DIR` or `postgres://…` (none: a fresh embedded store, deleted after).
    pub db: Option<String>,
    /// Concurrent verify-and-commit jobs of the pipeline.
    pub workers: NonZeroUsize,
    /// Largest batch the pipeline hands to the validator-committer.
    pub max_batch: NonZeroUsize,
    /// Unfinished txs in the dependency graph at which the pipeline stops pulling
    /// (none: the pipeline's default).
    pub max_pending: Option<NonZeroUsize>,
    /// Compare every status and the final state with the serial oracle.
    pub verify_serial: bool,
    /// Measure the baselines, with this many txs in the serial commit (and the verify
    /// sample); none: no baselines.
    pub baseline: Option<NonZeroUsize>,
}

/// What the run tells its caller while it goes on.
#[derive(Debug, Clone)]
pub enum Event {
    /// The workload is planned and signed; the genesis and the load come next.
    Prebuilt {
        /// Load blocks.
        load_blocks: usize,
        /// Load txs.
        load_txs: usize,
        /// Genesis blocks.
        genesis_blocks: usize,
        /// The namespace's signature scheme.
        scheme: Scheme,
        /// Seconds planning and signing took.
        seconds: f64,
    },
    /// After each load block the pipeline emitted.
    Progress(Progress),
}

/// A finished run: its summary and per-second rows.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The summary (with the oracle's counts and the baselines when asked for).
    pub summary: Summary,
    /// The per-second rows of the load, for the report.
    pub series: Series,
}

impl Outcome {
    /// Statuses and final-state rows on which the committer and the serial oracle
    /// disagree (0 and 0 without `verify_serial`).
    pub fn disagreements(&self) -> (u64, u64) {
        (
            self.summary.serial_mismatches.unwrap_or(0),
            self.summary.state_mismatches.unwrap_or(0),
        )
    }
}

/// Opens the database, pre-builds the workload of `spec`, runs it through the
/// committer pipeline as `schedule` paces it and sums it up; then the serial oracle
/// and the baselines if `options` asks for them.
pub async fn run(
    spec: WorkloadSpec,
    schedule: &Schedule,
    options: &Options,
    mut on_event: impl FnMut(Event),
) -> Result<Outcome> {
    let tmp = tempdir()?;
    let pool = u32::try_from((2 * options.workers.get()).clamp(4, 64)).unwrap_or(64);
    let (backend, kind) = open(options.db.as_deref(), &tmp, pool).await?;
    let (workload, prebuild_seconds) = prebuild(spec.clone()).await?;
    on_event(Event::Prebuilt {
        load_blocks: workload.load.len(),
        load_txs: workload.load_txs(),
        genesis_blocks: workload.genesis.len(),
        scheme: spec.scheme,
        seconds: prebuild_seconds,
    });
    let mut config = PipelineConfig {
        workers: options.workers,
        max_batch: options.max_batch,
        ..PipelineConfig::default()
    };
    if let Some(m) = options.max_pending {
        config.graph.max_pending = m.get();
    }
    let max_pending = config.graph.max_pending;
    let engine = Engine::new(
        backend.clone(),
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported()?,
    );
    let mut progress = |p: &Progress| on_event(Event::Progress(*p));
    let run = committer::run_paced(engine, &workload, config, schedule, &mut progress).await?;
    let info = RunInfo {
        backend: kind.to_string(),
        workers: options.workers.get(),
        max_batch: options.max_batch.get(),
        max_pending,
        prebuild_seconds,
    };
    let mut summary = committer::summarize(&workload, &run, &info);
    if options.verify_serial {
        let (statuses, state) = committer::verify_serial(&backend, workload.clone(), &run).await?;
        summary.serial_mismatches = Some(statuses);
        summary.state_mismatches = Some(state);
    }
    if let Some(txs) = options.baseline {
        summary.baseline = Some(baseline(options.db.as_deref(), txs, &spec, &workload, summary.tps).await?);
    }
    Ok(Outcome {
        summary,
        series: run.series,
    })
}

/// A temporary directory for a fresh embedded store.
fn tempdir() -> Result<tempfile::TempDir> {
    tempfile::tempdir().map_err(Error::TempDir)
}

/// A backend for `db` (or a fresh embedded store in `tmp`) with its schema, and its
/// kind (`embedded` or `postgres`).
async fn open(
    db: Option<&str>,
    tmp: &tempfile::TempDir,
    pool: u32,
) -> Result<(Arc<dyn Backend>, &'static str)> {
    let db = db.map_or_else(|| format!("embedded:{}", tmp.path().display()), str::to_string);
    let kind = match DbTarget::parse(&db)? {
        DbTarget::Embedded(_) => "embedded",
        DbTarget::Postgres(_) => "postgres",
    };
    let backend = open_backend(
        &db,
        &BackendOptions::with_pool(NonZeroU32::new(pool).unwrap_or(NonZeroU32::MIN)),
    )?;
    backend.init_schema().await.map_err(Error::Schema)?;
    Ok((backend, kind))
}

/// The workload of `spec`, planned and signed on a blocking thread, and the seconds
/// that took.
async fn prebuild(spec: WorkloadSpec) -> Result<(Arc<Workload>, f64)> {
    let t = Instant::now();
    let w = tokio::task::spawn_blocking(move || Workload::generate(&spec)).await??;
    Ok((Arc::new(w), t.elapsed().as_secs_f64()))
}

/// The verify ceiling on the load's txs, then a serial commit of `txs` txs of a
/// workload of its own (tag `<tag>s`) on a fresh embedded store or the same PostgreSQL
/// database; `tps`: the run's.
async fn baseline(
    db: Option<&str>,
    txs: NonZeroUsize,
    spec: &WorkloadSpec,
    workload: &Arc<Workload>,
    tps: f64,
) -> Result<Baseline> {
    let w = workload.clone();
    let sample = txs.get();
    let rates = tokio::task::spawn_blocking(move || loadgen::baseline::verify_rates(&w, sample)).await??;
    let serial_spec = WorkloadSpec {
        blocks: txs.get().div_ceil(spec.block_size),
        tag: format!("{}s", spec.tag),
        ..spec.clone()
    };
    let (serial_workload, _) = prebuild(serial_spec).await?;
    let tmp = tempdir()?;
    // The run's embedded store is still open (RocksDB locks its directory): the serial
    // baseline gets a fresh one in a temp dir; PostgreSQL is shared (its own tag).
    let db = match db {
        Some(db) if matches!(DbTarget::parse(db)?, DbTarget::Embedded(_)) => None,
        db => db,
    };
    let (backend, _) = open(db, &tmp, 4).await?;
    let engine = Engine::new(
        backend,
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported()?,
    );
    let serial = loadgen::baseline::serial_commit(engine, serial_workload, txs.get()).await?;
    Ok(baseline_of(&rates, &serial, tps))
}

/// The baselines' summary from the verify rates, the serial commit and the run's `tps`.
fn baseline_of(rates: &VerifyRates, serial: &SerialRun, tps: f64) -> Baseline {
    let cores = rates.cores as f64;
    let serial_tps = ratio(serial.txs as f64, serial.seconds);
    Baseline {
        cores: rates.cores as u64,
        verify_per_s_one_core: rates.one_core_per_s,
        verify_ceiling_per_s: rates.one_core_per_s * cores,
        verify_per_s_all_cores: rates.all_cores_per_s,
        verify_batch_per_s_one_core: rates.batch_one_core_per_s,
        verify_batch_ceiling_per_s: rates.batch_one_core_per_s * cores,
        verify_batch_per_s_all_cores: rates.batch_all_cores_per_s,
        tps_over_verify_ceiling: ratio(tps, rates.one_core_per_s * cores),
        serial_txs: serial.txs,
        serial_committed: serial.committed,
        serial_seconds: serial.seconds,
        serial_tps,
        pipeline_speedup: ratio(tps, serial_tps),
    }
}

/// `a / b`, or 0 when `b` is not positive.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_are_ratios_and_zero_without_time() {
        let rates = VerifyRates {
            sample: 100,
            one_core_per_s: 1000.0,
            all_cores_per_s: 3000.0,
            batch_one_core_per_s: 2000.0,
            batch_all_cores_per_s: 6000.0,
            cores: 4,
        };
        let serial = SerialRun {
            txs: 500,
            committed: 490,
            seconds: 2.0,
        };
        let b = baseline_of(&rates, &serial, 2000.0);
        assert_eq!(b.cores, 4);
        assert_eq!(b.verify_ceiling_per_s, 4000.0);
        assert_eq!(b.verify_batch_ceiling_per_s, 8000.0);
        assert_eq!(b.tps_over_verify_ceiling, 0.5);
        assert_eq!((b.serial_txs, b.serial_committed), (500, 490));
        assert_eq!(b.serial_tps, 250.0);
        assert_eq!(b.pipeline_speedup, 8.0);
        let instant = SerialRun {
            seconds: 0.0,
            ..serial
        };
        let b = baseline_of(&rates, &instant, 2000.0);
        assert_eq!((b.serial_tps, b.pipeline_speedup), (0.0, 0.0));
        let none = VerifyRates { cores: 0, ..rates };
        assert_eq!(baseline_of(&none, &serial, 2000.0).tps_over_verify_ceiling, 0.0);
    }
}
