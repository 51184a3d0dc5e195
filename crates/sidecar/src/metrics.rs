//! Prometheus metrics of the sidecar, under the prefix `fabrx_sidecar_`. The gauges tell an
//! operator where the committer's bottleneck is: a full graph with an empty ready queue
//! means verify or commit is slow (jobs in flight at the limit); a growing ready queue with
//! few jobs means the worker limit is too low.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge, Registry};

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
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Metrics> {
        let m = Metrics::new()?;
        registry.register(Box::new(m.graph_pending.clone()))?;
        registry.register(Box::new(m.graph_window.clone()))?;
        registry.register(Box::new(m.ready.clone()))?;
        registry.register(Box::new(m.jobs_in_flight.clone()))?;
        registry.register(Box::new(m.blocks.clone()))?;
        registry.register(Box::new(m.txs.clone()))?;
        registry.register(Box::new(m.committed.clone()))?;
        registry.register(Box::new(m.next_block.clone()))?;
        registry.register(Box::new(m.block_seconds.clone()))?;
        Ok(m)
    }

    /// Metrics that no registry exports yet (tests, tools; [`Metrics::register`] for a node).
    pub fn new() -> prometheus::Result<Metrics> {
        Ok(Metrics {
            graph_pending: IntGauge::new(
                "fabrx_sidecar_graph_pending",
                "Txs waiting in the dependency graph",
            )?,
            graph_window: IntGauge::new(
                "fabrx_sidecar_graph_window",
                "Span of merged txs from the oldest unfinished to the newest",
            )?,
            ready: IntGauge::new("fabrx_sidecar_ready", "Released txs waiting for a job")?,
            jobs_in_flight: IntGauge::new(
                "fabrx_sidecar_jobs_in_flight",
                "Verify-and-commit jobs in flight",
            )?,
            blocks: IntCounter::new("fabrx_sidecar_blocks_total", "Blocks final, in order")?,
            txs: IntCounter::new("fabrx_sidecar_txs_total", "Txs of final blocks")?,
            committed: IntCounter::new(
                "fabrx_sidecar_committed_txs_total",
                "Txs of final blocks that committed",
            )?,
            next_block: IntGauge::new("fabrx_sidecar_next_block", "The next block expected")?,
            block_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "fabrx_sidecar_block_seconds",
                    "Time from a block's admission into the pipeline to its final statuses",
                )
                .buckets(prometheus::exponential_buckets(0.001, 2.0, 16)?),
            )?,
        })
    }
}
