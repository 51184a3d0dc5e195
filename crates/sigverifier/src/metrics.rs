//! Prometheus metrics of the signature verifier, under the prefix `fabrx_sigverifier_`.

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge};
use telemetry::{Buckets, Registry};

/// The metrics of one signature verifier.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Batches answered.
    pub batches: IntCounter,
    /// Transactions by verdict (`valid`, `invalid`).
    pub txs: IntCounterVec,
    /// Policy updates applied.
    pub policy_updates: IntCounter,
    /// Batches received and not yet answered (queued on the pool or being verified).
    pub in_flight: IntGauge,
    /// Open verify streams.
    pub streams: IntGauge,
    /// Time to verify one batch on the pool.
    pub batch_seconds: Histogram,
}

impl Metrics {
    /// Makes the metrics in `registry`; both verdicts' series exist from the start.
    pub fn register(r: &Registry) -> Result<Metrics, telemetry::Error> {
        Ok(Metrics {
            batches: r.counter("batches_total", "Batches answered")?,
            txs: r.counter_by(
                "txs_total",
                "Transactions by verdict",
                "verdict",
                &["valid", "invalid"],
            )?,
            policy_updates: r.counter("policy_updates_total", "Policy updates applied")?,
            in_flight: r.gauge("batches_in_flight", "Batches received and not yet answered")?,
            streams: r.gauge("streams", "Open verify streams")?,
            batch_seconds: r.histogram("batch_seconds", "Time to verify one batch", Buckets::Call)?,
        })
    }
}
