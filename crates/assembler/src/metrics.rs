//! Prometheus metrics of an assembler, under the prefix `fabrx_assembler_`
//! (docs/metrics.md), set by the node's main loop and its Deliver service. The node's
//! command gives the registry its constant `party` label. Headers queued at the bound
//! with a small prefetch index mean batches arrive late (batchers or the network);
//! a large prefetch index means decisions arrive late (consenters).

use prometheus::{Histogram, IntCounter, IntGauge};
use telemetry::{Buckets, Registry};

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
    /// Fabric Deliver streams (`orderer.AtomicBroadcast/Deliver`) open.
    pub fabric_deliver_streams: IntGauge,
    /// Time to append and sync the blocks that became ready together.
    pub append_seconds: Histogram,
}

impl Metrics {
    /// Makes the metrics in `registry` (a node's, or a detached one).
    pub fn register(r: &Registry) -> Result<Metrics, telemetry::Error> {
        Ok(Metrics {
            blocks: r.counter("blocks_appended_total", "Blocks appended to the ledger")?,
            txs: r.counter("txs_appended_total", "Requests in the appended blocks")?,
            height: r.gauge("ledger_height", "Blocks in the ledger")?,
            decisions: r.counter("decisions_total", "Verified decisions handed to the core")?,
            queued_headers: r.gauge("queued_headers", "Ordered headers waiting for their batch")?,
            prefetch_bytes: r.gauge("prefetch_index_bytes", "Bytes of prefetched batches held")?,
            deliver_streams: r.gauge("deliver_streams", "Deliver streams open")?,
            fabric_deliver_streams: r.gauge(
                "fabric_deliver_streams",
                "Fabric Deliver streams (orderer.AtomicBroadcast/Deliver) open",
            )?,
            append_seconds: r.histogram(
                "append_seconds",
                "Time to append and sync the blocks that became ready together",
                Buckets::Call,
            )?,
        })
    }
}

/// Gauges as an `i64`, saturating.
pub(crate) fn gauge_value(v: impl TryInto<i64>) -> i64 {
    v.try_into().unwrap_or(i64::MAX)
}
