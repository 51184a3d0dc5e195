//! Prometheus metrics of the vcservice, under the prefix `fabrx_vcservice_`.

use prometheus::{HistogramVec, IntCounter, IntCounterVec, IntGaugeVec};
use std::sync::Arc;
use telemetry::{Buckets, Registry};

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
    /// Depth of the internal queue (`commit`: prepared batches waiting for a commit worker).
    pub queue_depth: IntGaugeVec,
}

impl Metrics {
    /// Makes the metrics in `registry`; the known statuses, stages, reasons and queues
    /// have their series from the start.
    pub fn register(r: &Registry) -> Result<Metrics, telemetry::Error> {
        let statuses: Vec<&str> = types::Status::ALL.iter().map(|s| s.name()).collect();
        Ok(Metrics {
            batches: r.counter("batches_total", "Batches processed")?,
            txs: r.counter_by("txs_total", "Transactions by final status", "status", &statuses)?,
            stage_seconds: r.histogram_vec(
                "stage_seconds",
                "Latency of each stage",
                &["stage"],
                Buckets::Call,
                &STAGES.iter().map(std::slice::from_ref).collect::<Vec<_>>(),
            )?,
            backend_calls: r.counter_by(
                "backend_calls_total",
                "Backend calls (database round trips)",
                "stage",
                &STAGES,
            )?,
            retries: r.counter_by(
                "retries_total",
                "Chunk retries by reason",
                "reason",
                &["conflict", "error"],
            )?,
            queue_depth: r.gauge_vec(
                "queue_depth",
                "Batches waiting in internal queues",
                &["queue"],
                &[&["commit"]],
            )?,
        })
    }

    /// Metrics that no registry exports (tests, and an engine inside another process).
    pub fn unexported() -> Result<Arc<Metrics>, telemetry::Error> {
        Ok(Arc::new(Metrics::register(&Registry::detached("vcservice"))?))
    }
}

/// The stages, as the `stage` label names them.
pub const STAGES: [&str; 3] = ["statuses", "validate", "commit"];
