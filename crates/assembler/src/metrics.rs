//! Prometheus metrics of an assembler, under the prefix `fabrx_assembler_`
//! (docs/metrics.md), set by the node's main loop and its Deliver service. The node's
//! command gives the registry its constant `party` label. Headers queued at the bound
//! with a small prefetch index mean batches arrive late (batchers or the network);
//! a large prefetch index means decisions arrive late (consenters).

use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge, Registry};

/// The metrics of one assembler.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Blocks appended to the ledger (synced) since the node started.
    pub blocks: IntCounter,
    /// Requests (txs) in those blocks.
    pub txs: IntCounter,
    /// Blocks in the ledger (the next block's number).
    pub height: IntGauge,
    /// Verified decisions handed to the core.
    pub decisions: IntCounter,
    /// Ordered headers waiting for their batch.
    pub queued_headers: IntGauge,
    /// Bytes of prefetched batches held in the index.
    pub prefetch_bytes: IntGauge,
    /// Deliver streams open.
    pub deliver_streams: IntGauge,
    /// Time to append and sync the blocks that became ready together.
    pub append_seconds: Histogram,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Metrics> {
        let m = Metrics::new()?;
        registry.register(Box::new(m.blocks.clone()))?;
        registry.register(Box::new(m.txs.clone()))?;
        registry.register(Box::new(m.height.clone()))?;
        registry.register(Box::new(m.decisions.clone()))?;
        registry.register(Box::new(m.queued_headers.clone()))?;
        registry.register(Box::new(m.prefetch_bytes.clone()))?;
        registry.register(Box::new(m.deliver_streams.clone()))?;
        registry.register(Box::new(m.append_seconds.clone()))?;
        Ok(m)
    }

    /// Metrics that no registry exports (tests; [`Metrics::register`] for a node).
    pub fn new() -> prometheus::Result<Metrics> {
        Ok(Metrics {
            blocks: IntCounter::new(
                "fabrx_assembler_blocks_appended_total",
                "Blocks appended to the ledger",
            )?,
            txs: IntCounter::new(
                "fabrx_assembler_txs_appended_total",
                "Requests in the appended blocks",
            )?,
            height: IntGauge::new("fabrx_assembler_ledger_height", "Blocks in the ledger")?,
            decisions: IntCounter::new(
                "fabrx_assembler_decisions_total",
                "Verified decisions handed to the core",
            )?,
            queued_headers: IntGauge::new(
                "fabrx_assembler_queued_headers",
                "Ordered headers waiting for their batch",
            )?,
            prefetch_bytes: IntGauge::new(
                "fabrx_assembler_prefetch_index_bytes",
                "Bytes of prefetched batches held",
            )?,
            deliver_streams: IntGauge::new("fabrx_assembler_deliver_streams", "Deliver streams open")?,
            append_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "fabrx_assembler_append_seconds",
                    "Time to append and sync the blocks that became ready together",
                )
                .buckets(prometheus::exponential_buckets(0.0001, 2.0, 16)?),
            )?,
        })
    }
}

/// Gauges as an `i64`, saturating.
pub(crate) fn gauge_value(v: impl TryInto<i64>) -> i64 {
    v.try_into().unwrap_or(i64::MAX)
}
