//! Prometheus metrics of the vcservice, under the prefix `fabrx_vcservice_`.

use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

/// The metrics of one vcservice.
pub struct Metrics {
    /// Batches processed.
    pub batches: IntCounter,
    /// Transactions by final status.
    pub txs: IntCounterVec,
    /// Latency of each stage (`statuses`, `validate`, `commit`).
    pub stage_seconds: HistogramVec,
    /// Backend calls by stage (each is at least one database round trip).
    pub backend_calls: IntCounterVec,
    /// Retries by reason (`conflict`, `error`).
    pub retries: IntCounterVec,
    /// Depth of the internal queues (`incoming`, `commit`).
    pub queue_depth: IntGaugeVec,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Metrics> {
        let m = Metrics {
            batches: IntCounter::new("fabrx_vcservice_batches_total", "Batches processed")?,
            txs: IntCounterVec::new(
                Opts::new("fabrx_vcservice_txs_total", "Transactions by final status"),
                &["status"],
            )?,
            stage_seconds: HistogramVec::new(
                HistogramOpts::new("fabrx_vcservice_stage_seconds", "Latency of each stage")
                    .buckets(prometheus::exponential_buckets(0.0001, 2.0, 18)?),
                &["stage"],
            )?,
            backend_calls: IntCounterVec::new(
                Opts::new(
                    "fabrx_vcservice_backend_calls_total",
                    "Backend calls (database round trips)",
                ),
                &["stage"],
            )?,
            retries: IntCounterVec::new(
                Opts::new("fabrx_vcservice_retries_total", "Chunk retries by reason"),
                &["reason"],
            )?,
            queue_depth: IntGaugeVec::new(
                Opts::new(
                    "fabrx_vcservice_queue_depth",
                    "Batches waiting in internal queues",
                ),
                &["queue"],
            )?,
        };
        registry.register(Box::new(m.batches.clone()))?;
        registry.register(Box::new(m.txs.clone()))?;
        registry.register(Box::new(m.stage_seconds.clone()))?;
        registry.register(Box::new(m.backend_calls.clone()))?;
        registry.register(Box::new(m.retries.clone()))?;
        registry.register(Box::new(m.queue_depth.clone()))?;
        Ok(m)
    }
}
