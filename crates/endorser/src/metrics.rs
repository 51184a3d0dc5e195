//! Prometheus metrics of an endorser (`fabrx_endorser_*`).

use prometheus::{Histogram, IntCounterVec};
use telemetry::{Buckets, Registry};

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
    /// Makes the metrics in `registry`; every outcome's series exists from the start.
    pub fn register(r: &Registry) -> Result<Metrics, telemetry::Error> {
        let outcomes: Vec<&str> = std::iter::once("endorsed")
            .chain(token::rejection::Reason::ALL.iter().map(|r| r.name()))
            .collect();
        Ok(Metrics {
            requests: r.counter_by(
                "requests_total",
                "Token requests answered, by outcome",
                "outcome",
                &outcomes,
            )?,
            latency: r.histogram(
                "latency_seconds",
                "Endorsement latency, state read included",
                Buckets::Call,
            )?,
            sign_seconds: r.histogram("sign_seconds", "Checking and partial signing time", Buckets::Call)?,
        })
    }
}
