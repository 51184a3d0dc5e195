//! Prometheus metrics of a router, under the prefix `fabrx_router_` (docs/metrics.md).
//! The node's command gives the registry its constant `party` label. The in-flight
//! gauges tell an operator which shard's batcher is the bottleneck: a shard held at its
//! bound answers `RESOURCE_EXHAUSTED` (`refused_total{reason="shard_full"}`).

use crate::error::Error;
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use std::time::Duration;
use types::ShardId;

/// The metrics of one router.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Requests the batcher admitted (acked `OK` to the client).
    pub admitted: IntCounter,
    /// Requests not acked, by reason ([`reason`]).
    pub refused: IntCounterVec,
    /// Requests awaiting their batcher's answer, by shard.
    pub in_flight: IntGaugeVec,
    /// Bytes of those requests, by shard.
    pub in_flight_bytes: IntGaugeVec,
    /// Client `Submit` streams open.
    pub streams: IntGauge,
    /// Time from a request's arrival to its batcher's answer (admitted requests).
    pub admit_seconds: Histogram,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Metrics> {
        let m = Metrics::new()?;
        registry.register(Box::new(m.admitted.clone()))?;
        registry.register(Box::new(m.refused.clone()))?;
        registry.register(Box::new(m.in_flight.clone()))?;
        registry.register(Box::new(m.in_flight_bytes.clone()))?;
        registry.register(Box::new(m.streams.clone()))?;
        registry.register(Box::new(m.admit_seconds.clone()))?;
        Ok(m)
    }

    /// Metrics that no registry exports (tests; [`Metrics::register`] for a node).
    pub fn new() -> prometheus::Result<Metrics> {
        Ok(Metrics {
            admitted: IntCounter::new(
                "fabrx_router_requests_admitted_total",
                "Requests the batcher admitted (acked OK)",
            )?,
            refused: IntCounterVec::new(
                Opts::new(
                    "fabrx_router_requests_refused_total",
                    "Requests not acked, by reason",
                ),
                &["reason"],
            )?,
            in_flight: IntGaugeVec::new(
                Opts::new(
                    "fabrx_router_in_flight_requests",
                    "Requests awaiting their batcher's answer",
                ),
                &["shard"],
            )?,
            in_flight_bytes: IntGaugeVec::new(
                Opts::new(
                    "fabrx_router_in_flight_bytes",
                    "Bytes of requests awaiting their batcher's answer",
                ),
                &["shard"],
            )?,
            streams: IntGauge::new("fabrx_router_streams", "Client Submit streams open")?,
            admit_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "fabrx_router_admit_seconds",
                    "Time from a request's arrival to its batcher's admission",
                )
                .buckets(prometheus::exponential_buckets(0.0001, 2.0, 16)?),
            )?,
        })
    }

    /// Records shard `shard`'s in-flight load.
    pub(crate) fn set_in_flight(&self, shard: ShardId, (requests, bytes): (usize, u64)) {
        let label = shard.to_string();
        self.in_flight
            .with_label_values(&[label.as_str()])
            .set(i64::try_from(requests).unwrap_or(i64::MAX));
        self.in_flight_bytes
            .with_label_values(&[label.as_str()])
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Records the outcome of one request, answered `took` after it arrived.
    pub(crate) fn on_answer(&self, result: &Result<(), Error>, took: Duration) {
        match result {
            Ok(()) => {
                self.admitted.inc();
                self.admit_seconds.observe(took.as_secs_f64());
            }
            Err(e) => self.refused.with_label_values(&[reason(e)]).inc(),
        }
    }
}

/// The `reason` label of a request that was not acked: `invalid` (the router's own
/// checks), `unknown_client`, `bad_signature`, `batcher_<refusal>`, `shard_full`,
/// `link_busy`, `link_down`, `no_answer` or `internal`.
pub fn reason(e: &Error) -> &'static str {
    use crate::answer::BatcherRefusal;
    use crate::refusal::Refusal;
    match e {
        Error::Refused(Refusal::UnknownClient) => "unknown_client",
        Error::Refused(Refusal::BadSignature) => "bad_signature",
        Error::Refused(_) => "invalid",
        Error::BatcherRefused { reason } => match reason {
            BatcherRefusal::Duplicate => "batcher_duplicate",
            BatcherRefusal::MempoolFullRequests | BatcherRefusal::MempoolFullBytes => "batcher_full",
            BatcherRefusal::TooLarge => "batcher_too_large",
            BatcherRefusal::WrongShard => "batcher_wrong_shard",
            BatcherRefusal::Unspecified => "batcher_other",
        },
        Error::ShardFullRequests { .. } | Error::ShardFullBytes { .. } => "shard_full",
        Error::LinkBusy { .. } => "link_busy",
        Error::LinkDown { .. } => "link_down",
        Error::NoAnswer { .. } => "no_answer",
        Error::InvalidConfig { .. }
        | Error::Listen { .. }
        | Error::Serve(_)
        | Error::UnknownShard { .. }
        | Error::DuplicateLinkId { .. } => "internal",
    }
}
