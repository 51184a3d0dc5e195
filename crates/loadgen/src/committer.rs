//! The committer load driver: the load generator acts as the orderer and hands
//! pre-signed blocks to the in-process committer pipeline as fast as it pulls them.
//!
//! The genesis blocks run first (timed apart); then the load blocks. The pipeline pulls
//! a block from the iterator whenever it has capacity; the pull instant of each block is
//! recorded, and the latency of every tx of a block is the time from that pull to the
//! emission of the block's final statuses.

use crate::oracle::SerialOracle;
use crate::summary::Summary;
use crate::workload::Workload;
use crate::{Error, Histogram, Result};
use sidecar::pipeline::{BlockResult, Pipeline, PipelineConfig};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use types::Block;
use types::{META_NAMESPACE, Status};
use vcservice::{Backend, Engine};

/// Where a run stands, reported after each emitted load block.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Load blocks emitted.
    pub blocks: usize,
    /// Load blocks in the run.
    pub of_blocks: usize,
    /// Load txs final.
    pub txs: u64,
    /// Of those, committed.
    pub committed: u64,
    /// Since the first load block was handed over.
    pub elapsed: Duration,
}

/// The measured outcome of a run.
#[derive(Debug, Clone)]
pub struct LoadRun {
    /// Status of every load tx, by block and index.
    pub statuses: Vec<Vec<Status>>,
    /// Latency of every load tx, in microseconds.
    pub latency_us: Histogram,
    /// Seconds from handing over the first load block to the last emission.
    pub seconds: f64,
    /// Seconds the genesis blocks took.
    pub genesis_seconds: f64,
}

impl LoadRun {
    /// Load txs with `status`.
    pub fn count(&self, status: Status) -> u64 {
        self.statuses.iter().flatten().filter(|s| **s == status).count() as u64
    }
}

/// Creates a pipeline over `engine` and runs the workload's genesis through it (refused
/// when the namespace exists already: resubmitted txs would only replay stored statuses); returns
/// the pipeline (ready for the load blocks) and the seconds the genesis took.
pub async fn setup(engine: Engine, workload: &Workload, config: PipelineConfig) -> Result<(Pipeline, f64)> {
    let ns = workload.spec.namespace();
    if engine.backend().namespaces().await?.contains(&ns) {
        return Err(Error::NamespaceExists { ns });
    }
    let mut config = config;
    config.graph.first_block = 0;
    let mut pipeline = committer::in_process(engine, &workload.meta_policy, config).await?;
    let started = Instant::now();
    let mut genesis: Vec<BlockResult> = Vec::new();
    pipeline
        .run(workload.genesis.clone(), |b| {
            genesis.push(b);
            Ok(())
        })
        .await?;
    for (id, status) in genesis.iter().flat_map(|b| &b.statuses) {
        if *status != Status::Committed {
            return Err(Error::GenesisFailed {
                id: id.0.clone(),
                status: status.name(),
            });
        }
    }
    Ok((pipeline, started.elapsed().as_secs_f64()))
}

/// Runs the genesis, then the load blocks, through a pipeline over `engine`.
pub async fn run(
    engine: Engine,
    workload: &Workload,
    config: PipelineConfig,
    progress: &mut dyn FnMut(&Progress),
) -> Result<LoadRun> {
    let (mut pipeline, genesis_seconds) = setup(engine, workload, config).await?;

    let pulls: Arc<Mutex<VecDeque<Instant>>> = Arc::new(Mutex::new(VecDeque::new()));
    let pulled = pulls.clone();
    let blocks = workload.load.iter().map(move |b: &Block| {
        pulled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(Instant::now());
        b.clone()
    });
    let mut out = LoadRun {
        statuses: Vec::with_capacity(workload.load.len()),
        latency_us: Histogram::new(),
        seconds: 0.0,
        genesis_seconds,
    };
    let mut bad: Option<Error> = None;
    let (mut txs, mut committed) = (0u64, 0u64);
    let start = Instant::now();
    pipeline
        .run(blocks, |b| {
            let now = Instant::now();
            let pulled_at = pulls.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
            let i = out.statuses.len();
            let expected = workload.load.get(i);
            if expected.is_none_or(|e| e.number() != b.number || e.txs.len() != b.statuses.len()) {
                bad.get_or_insert(Error::UnexpectedBlock {
                    expected: expected.map_or(u64::MAX, |e| e.number()),
                    got: b.number,
                    txs: b.statuses.len(),
                });
            }
            let n = b.statuses.len() as u64;
            let latency = pulled_at.map_or(Duration::ZERO, |p| now.duration_since(p));
            out.latency_us.record(latency.as_micros() as u64, n);
            txs += n;
            committed += b.statuses.iter().filter(|s| s.1 == Status::Committed).count() as u64;
            out.statuses.push(b.statuses.into_iter().map(|s| s.1).collect());
            progress(&Progress {
                blocks: i + 1,
                of_blocks: workload.load.len(),
                txs,
                committed,
                elapsed: start.elapsed(),
            });
            Ok(())
        })
        .await?;
    out.seconds = start.elapsed().as_secs_f64();
    match bad {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Facts about a run that the summary reports besides the measurements.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// `embedded` or `postgres`.
    pub backend: String,
    /// Pipeline workers.
    pub workers: usize,
    /// Pipeline batch size.
    pub max_batch: usize,
    /// Dependency-graph back-pressure bound (`PipelineConfig::graph.max_pending`).
    pub max_pending: usize,
    /// Seconds spent planning and signing.
    pub prebuild_seconds: f64,
}

/// The summary of a run (without the serial comparison and the baseline).
pub fn summarize(workload: &Workload, run: &LoadRun, info: &RunInfo) -> Summary {
    let spec = &workload.spec;
    let txs = run.statuses.iter().map(Vec::len).sum::<usize>() as u64;
    let committed = run.count(Status::Committed);
    let mvcc = run.count(Status::AbortedMvccConflict);
    let sig = run.count(Status::AbortedSignatureInvalid);
    let per_s = |n: u64| {
        if run.seconds > 0.0 {
            n as f64 / run.seconds
        } else {
            0.0
        }
    };
    let ms = |q: f64| run.latency_us.quantile(q).map_or(0.0, |us| us as f64 / 1000.0);
    Summary {
        txs,
        committed,
        mvcc_conflict: mvcc,
        signature_invalid: sig,
        seconds: run.seconds,
        tps: per_s(txs),
        goodput_tps: per_s(committed),
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        serial_mismatches: None,
        other: txs - committed - mvcc - sig,
        state_mismatches: None,
        blocks: spec.blocks as u64,
        block_size: spec.block_size as u64,
        reads: spec.reads as u64,
        writes: spec.writes as u64,
        scheme: spec.scheme.name().into(),
        conflict_rate: spec.conflict_rate,
        invalid_sig_rate: spec.invalid_sig_rate,
        seed: spec.seed,
        tag: spec.tag.clone(),
        backend: info.backend.clone(),
        workers: info.workers as u64,
        max_batch: info.max_batch as u64,
        max_pending: info.max_pending as u64,
        prebuild_seconds: info.prebuild_seconds,
        genesis_seconds: run.genesis_seconds,
        baseline: None,
    }
}

/// The serial oracle's statuses of the load blocks and its final rows of the token
/// namespace (plus the namespace's `_meta` row).
pub struct OracleResult {
    /// Status of every load tx, by block and index.
    pub statuses: Vec<Vec<Status>>,
    /// (key, value, version) of the token namespace, by key.
    pub rows: Vec<(Vec<u8>, Vec<u8>, u64)>,
    /// The namespace's `_meta` row.
    pub meta_row: Option<(Vec<u8>, u64)>,
}

/// Applies the whole workload (genesis and load) to a [`SerialOracle`]. CPU-bound: call it
/// on a blocking thread.
pub fn oracle(workload: &Workload) -> Result<OracleResult> {
    let mut o = SerialOracle::new(&workload.meta_policy)?;
    for b in &workload.genesis {
        o.apply_block(b);
    }
    let statuses = workload.load.iter().map(|b| o.apply_block(b)).collect();
    let ns = workload.spec.namespace();
    let meta_row = o
        .rows()
        .get(&(META_NAMESPACE.to_string(), ns.clone().into_bytes()))
        .cloned();
    Ok(OracleResult {
        statuses,
        rows: o.rows_of(&ns),
        meta_row,
    })
}

/// Txs whose status differs between a run and the oracle (a missing block counts all its
/// txs).
pub fn status_mismatches(run: &LoadRun, oracle: &OracleResult) -> u64 {
    let blocks = run.statuses.len().max(oracle.statuses.len());
    (0..blocks)
        .map(|i| {
            let (a, b) = (run.statuses.get(i), oracle.statuses.get(i));
            let (a, b) = (a.map_or(&[][..], Vec::as_slice), b.map_or(&[][..], Vec::as_slice));
            let diff = a.iter().zip(b).filter(|(x, y)| x != y).count();
            (diff + a.len().abs_diff(b.len())) as u64
        })
        .sum()
}

/// Rows of the token namespace (and its `_meta` row) that differ between the backend and
/// the oracle: missing, extra, or with another value or version.
pub async fn state_mismatches(
    backend: &Arc<dyn Backend>,
    workload: &Workload,
    oracle: &OracleResult,
) -> Result<u64> {
    let ns = workload.spec.namespace();
    let got: std::collections::BTreeMap<Vec<u8>, (Vec<u8>, u64)> = backend
        .scan(&ns)
        .await?
        .into_iter()
        .map(|r| (r.key, (r.value, r.version)))
        .collect();
    let mut diff = 0u64;
    for (k, v, ver) in &oracle.rows {
        if got.get(k) != Some(&(v.clone(), *ver)) {
            diff += 1;
        }
    }
    let want: std::collections::HashSet<&Vec<u8>> = oracle.rows.iter().map(|r| &r.0).collect();
    diff += got.keys().filter(|k| !want.contains(k)).count() as u64;
    let meta = backend
        .scan(META_NAMESPACE)
        .await?
        .into_iter()
        .find(|r| r.key == ns.as_bytes())
        .map(|r| (r.value, r.version));
    if meta != oracle.meta_row {
        diff += 1;
    }
    Ok(diff)
}

/// Runs [`oracle`] on a blocking thread and compares statuses and final state.
pub async fn verify_serial(
    backend: &Arc<dyn Backend>,
    workload: Arc<Workload>,
    run: &LoadRun,
) -> Result<(u64, u64)> {
    let w = workload.clone();
    let oracle = tokio::task::spawn_blocking(move || oracle(&w))
        .await
        .map_err(|e| Error::Task {
            detail: e.to_string(),
        })??;
    let statuses = status_mismatches(run, &oracle);
    let state = state_mismatches(backend, &workload, &oracle).await?;
    Ok((statuses, state))
}
