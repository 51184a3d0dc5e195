//! Prometheus metrics of the sidecar, under the prefix `fabrx_sidecar_`. The gauges tell an
//! operator where the committer's bottleneck is: a full graph with an empty ready queue
//! means verify or commit is slow (jobs in flight at the limit); a growing ready queue with
//! few jobs means the worker limit is too low.

use prometheus::{Histogram, IntCounter, IntGauge};
use telemetry::{Buckets, Registry};

/// The metrics of one sidecar.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Txs waiting in the dependency graph (merged and unfinished).
    pub graph_pending: IntGauge,
    /// Span of merged txs from the oldest unfinished one to the newest.
    pub graph_window: IntGauge,
    /// Released txs waiting for a verify-and-commit job.
    pub ready: IntGauge,
    /// Verify-and-commit jobs in flight.
    pub jobs_in_flight: IntGauge,
    /// Blocks whose every tx is final (emitted in order).
    pub blocks: IntCounter,
    /// Txs of those blocks.
    pub txs: IntCounter,
    /// Txs of those blocks that committed.
    pub committed: IntCounter,
    /// The next block the sidecar expects.
    pub next_block: IntGauge,
    /// Time from a block's admission into the pipeline to its final statuses.
    pub block_seconds: Histogram,
}

impl Metrics {
    /// Makes the metrics in `registry` (a node's, or a detached one).
    pub fn register(r: &Registry) -> Result<Metrics, telemetry::Error> {
        Ok(Metrics {
            graph_pending: r.gauge("graph_pending", "Txs waiting in the dependency graph")?,
            graph_window: r.gauge(
                "graph_window",
                "Span of merged txs from the oldest unfinished to the newest",
            )?,
            ready: r.gauge("ready", "Released txs waiting for a job")?,
            jobs_in_flight: r.gauge("jobs_in_flight", "Verify-and-commit jobs in flight")?,
            blocks: r.counter("blocks_total", "Blocks final, in order")?,
            txs: r.counter("txs_total", "Txs of final blocks")?,
            committed: r.counter("committed_txs_total", "Txs of final blocks that committed")?,
            next_block: r.gauge("next_block", "The next block expected")?,
            block_seconds: r.histogram(
                "block_seconds",
                "Time from a block's admission into the pipeline to its final statuses",
                Buckets::Stage,
            )?,
        })
    }

    /// Metrics that no registry exports (tests, tools, a pipeline inside another process).
    pub fn unexported() -> Result<Metrics, telemetry::Error> {
        Metrics::register(&Registry::detached("sidecar"))
    }
}
