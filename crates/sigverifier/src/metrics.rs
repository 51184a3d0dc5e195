//! Prometheus metrics of the signature verifier, under the prefix `fabrx_sigverifier_`.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

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
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Metrics> {
        let m = Metrics {
            batches: IntCounter::new("fabrx_sigverifier_batches_total", "Batches answered")?,
            txs: IntCounterVec::new(
                Opts::new("fabrx_sigverifier_txs_total", "Transactions by verdict"),
                &["verdict"],
            )?,
            policy_updates: IntCounter::new(
                "fabrx_sigverifier_policy_updates_total",
                "Policy updates applied",
            )?,
            in_flight: IntGauge::new(
                "fabrx_sigverifier_batches_in_flight",
                "Batches received and not yet answered",
            )?,
            streams: IntGauge::new("fabrx_sigverifier_streams", "Open verify streams")?,
            batch_seconds: Histogram::with_opts(
                HistogramOpts::new("fabrx_sigverifier_batch_seconds", "Time to verify one batch")
                    .buckets(prometheus::exponential_buckets(0.0001, 2.0, 18)?),
            )?,
        };
        registry.register(Box::new(m.batches.clone()))?;
        registry.register(Box::new(m.txs.clone()))?;
        registry.register(Box::new(m.policy_updates.clone()))?;
        registry.register(Box::new(m.in_flight.clone()))?;
        registry.register(Box::new(m.streams.clone()))?;
        registry.register(Box::new(m.batch_seconds.clone()))?;
        Ok(m)
    }
}
