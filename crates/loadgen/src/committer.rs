//! The committer load driver: the load generator acts as the orderer and hands
//! pre-signed blocks to the in-process committer pipeline as fast as it pulls them, or
//! paced by a [`Schedule`] (a fixed rate or rate steps, open loop).
//!
//! The genesis blocks run first (timed apart); then the load blocks. The pipeline pulls
//! a block from the source whenever it has capacity (and, paced, the block is due); the
//! instant each block was due and pulled is recorded, and the latency of every tx of a
//! block is the time from its due instant (its pull, unpaced) to the emission of the
//! block's final statuses.

use crate::oracle::SerialOracle;
use crate::series::{Recorder, Schedule, Series};
use crate::summary::Summary;
use crate::workload::Workload;
use crate::{Error, Histogram, Result};
use sidecar::pipeline::{BlockResult, BlockSource, Next, Pipeline, PipelineConfig};
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
    /// Per second and per rate step.
    pub series: Series,
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

/// Runs the genesis, then the load blocks, through a pipeline over `engine`, each block
/// as soon as the pipeline takes it.
pub async fn run(
    engine: Engine,
    workload: &Workload,
    config: PipelineConfig,
    progress: &mut dyn FnMut(&Progress),
) -> Result<LoadRun> {
    run_paced(engine, workload, config, &Schedule::Unpaced, progress).await
}

/// When a load block was due and when the pipeline took it.
#[derive(Clone, Copy)]
struct Pull {
    due: Instant,
    taken: Instant,
}

/// The load blocks, each offered once its first tx is due by the schedule (open loop)
/// and taken when the pipeline has room; the instants are queued for the emitter.
struct PacedSource<'a> {
    blocks: &'a [Block],
    next: usize,
    /// Tx index of the first tx of block `next`.
    first_tx: u64,
    schedule: &'a Schedule,
    start: Instant,
    pulls: &'a Mutex<VecDeque<Pull>>,
}

impl PacedSource<'_> {
    fn due(&self) -> Option<Instant> {
        self.schedule.due(self.first_tx).map(|d| self.start + d)
    }
}

impl BlockSource for PacedSource<'_> {
    fn try_next(&mut self) -> Next {
        let (Some(block), Some(due)) = (self.blocks.get(self.next), self.due()) else {
            return Next::Done;
        };
        let now = Instant::now();
        if due > now {
            return Next::Later;
        }
        self.next += 1;
        self.first_tx += block.txs.len() as u64;
        // Unpaced, every block is "due" at the start: its latency runs from its pull.
        let due = if matches!(self.schedule, Schedule::Unpaced) {
            now
        } else {
            due
        };
        let pull = Pull { due, taken: now };
        self.pulls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(pull);
        Next::Block(block.clone())
    }

    fn ready(&mut self) -> impl std::future::Future<Output = ()> + Send {
        let due = self.due().unwrap_or(self.start);
        tokio::time::sleep_until(due.into())
    }
}

/// Runs the genesis, then the load blocks, through a pipeline over `engine`, each block
/// offered when `schedule` says its first tx is due. A tx's latency runs from that
/// instant (from the pull, unpaced) to its block's emission, so a pipeline that falls
/// behind an open-loop rate shows the queueing in its latency.
pub async fn run_paced(
    engine: Engine,
    workload: &Workload,
    config: PipelineConfig,
    schedule: &Schedule,
    progress: &mut dyn FnMut(&Progress),
) -> Result<LoadRun> {
    let (mut pipeline, genesis_seconds) = setup(engine, workload, config).await?;
    let pulls: Mutex<VecDeque<Pull>> = Mutex::new(VecDeque::new());
    let mut out = LoadRun {
        statuses: Vec::with_capacity(workload.load.len()),
        latency_us: Histogram::new(),
        seconds: 0.0,
        genesis_seconds,
        series: Series::default(),
    };
    let mut recorder = Recorder::new(schedule);
    let mut bad: Option<Error> = None;
    let (mut txs, mut committed) = (0u64, 0u64);
    let start = Instant::now();
    let source = PacedSource {
        blocks: &workload.load,
        next: 0,
        first_tx: 0,
        schedule,
        start,
        pulls: &pulls,
    };
    pipeline
        .run_source(source, |b| {
            let now = Instant::now();
            let pull = pulls.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
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
            let pull = pull.unwrap_or(Pull { due: now, taken: now });
            let latency = now.duration_since(pull.due);
            out.latency_us.record(latency.as_micros() as u64, n);
            let since = |t: Instant| t.saturating_duration_since(start);
            recorder.on_sent(since(pull.due), n);
            recorder.on_acked(since(pull.taken), n);
            let mut by_status: Vec<(Status, u64)> = Vec::new();
            for (_, st) in &b.statuses {
                match by_status.iter_mut().find(|(s, _)| s == st) {
                    Some((_, c)) => *c += 1,
                    None => by_status.push((*st, 1)),
                }
            }
            for (st, c) in by_status {
                recorder.on_final(since(now), since(pull.due), st.name(), c);
            }
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
    let end = start.elapsed();
    out.seconds = end.as_secs_f64();
    out.series = recorder.finish(end);
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
        steps: (!run.series.steps.is_empty()).then(|| run.series.steps.clone()),
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
