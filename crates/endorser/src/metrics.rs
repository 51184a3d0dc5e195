//! Prometheus metrics of an endorser (`fabrx_endorser_*`).

use prometheus::{Histogram, HistogramOpts, IntCounterVec, Opts, Registry};

/// An endorser's metrics.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Requests answered, by outcome (`endorsed` or the rejection reason).
    pub requests: IntCounterVec,
    /// Seconds from a request's arrival to its answer, endorsed requests only (state read
    /// included).
    pub latency: Histogram,
    /// Seconds spent checking and signing (no state read).
    pub sign_seconds: Histogram,
}

impl Metrics {
    /// Registers the metrics in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Metrics> {
        let requests = IntCounterVec::new(
            Opts::new(
                "fabrx_endorser_requests_total",
                "Token requests answered, by outcome",
            ),
            &["outcome"],
        )?;
        let buckets = prometheus::exponential_buckets(0.0001, 2.0, 16)?;
        let latency = Histogram::with_opts(
            HistogramOpts::new(
                "fabrx_endorser_latency_seconds",
                "Endorsement latency, state read included",
            )
            .buckets(buckets.clone()),
        )?;
        let sign_seconds = Histogram::with_opts(
            HistogramOpts::new("fabrx_endorser_sign_seconds", "Checking and partial signing time")
                .buckets(buckets),
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(sign_seconds.clone()))?;
        Ok(Metrics {
            requests,
            latency,
            sign_seconds,
        })
    }
}
