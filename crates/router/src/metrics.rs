//! Prometheus metrics of a router, under the prefix `fabrx_router_` (docs/metrics.md).
//! The node's command gives the registry its constant `party` label. The in-flight
//! gauges tell an operator which shard's batcher is the bottleneck: a shard held at its
//! bound answers `RESOURCE_EXHAUSTED` (`refused_total{reason="shard_full"}`).

use crate::error::Error;
use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};
use std::time::Duration;
use telemetry::{Buckets, Registry};
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
    /// Client `Submit`, `SubmitMany` and `Broadcast` streams open.
    pub streams: IntGauge,
    /// Client messages read (a `Submit` or `Broadcast` message carries one request, a
    /// `SubmitMany` message many).
    pub client_messages: IntCounter,
    /// Requests in those messages.
    pub client_requests: IntCounter,
    /// Time from a request's arrival to its batcher's answer (admitted requests).
    pub admit_seconds: Histogram,
    /// `Broadcast` answers, by Fabric status ([`BROADCAST_STATUSES`]).
    pub broadcast_answers: IntCounterVec,
    /// `Broadcast` envelopes tried again after a full bound (shard in flight, link,
    /// mempool) refused them; one count per retry.
    pub broadcast_retries: IntCounter,
}

impl Metrics {
    /// Makes the metrics in `registry` (a node's, or a detached one).
    pub fn register(r: &Registry) -> Result<Metrics, telemetry::Error> {
        Ok(Metrics {
            admitted: r.counter(
                "requests_admitted_total",
                "Requests the batcher admitted (acked OK)",
            )?,
            refused: r.counter_by(
                "requests_refused_total",
                "Requests not acked, by reason",
                "reason",
                &REASONS,
            )?,
            in_flight: r.gauge_vec(
                "in_flight_requests",
                "Requests awaiting their batcher's answer",
                &["shard"],
                &[],
            )?,
            in_flight_bytes: r.gauge_vec(
                "in_flight_bytes",
                "Bytes of requests awaiting their batcher's answer",
                &["shard"],
                &[],
            )?,
            streams: r.gauge("streams", "Client Submit, SubmitMany and Broadcast streams open")?,
            client_messages: r.counter(
                "client_messages_total",
                "Client messages read (one request per Submit or Broadcast message, many per SubmitMany message)",
            )?,
            client_requests: r.counter("client_requests_total", "Requests in the client messages read")?,
            admit_seconds: r.histogram(
                "admit_seconds",
                "Time from a request's arrival to its batcher's admission",
                Buckets::Call,
            )?,
            broadcast_answers: r.counter_by(
                "broadcast_answers_total",
                "Broadcast answers, by Fabric status",
                "status",
                &BROADCAST_STATUSES,
            )?,
            broadcast_retries: r.counter(
                "broadcast_retries_total",
                "Broadcast envelopes tried again after a full bound refused them",
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

/// Every value of the `status` label of `broadcast_answers_total` (the Fabric statuses
/// a `Broadcast` answer takes; docs/router.md "Fabric Broadcast").
pub const BROADCAST_STATUSES: [&str; 6] = [
    "SUCCESS",
    "BAD_REQUEST",
    "FORBIDDEN",
    "REQUEST_ENTITY_TOO_LARGE",
    "SERVICE_UNAVAILABLE",
    "INTERNAL_SERVER_ERROR",
];

/// Every value of the `reason` label (their series exist from the start).
pub const REASONS: [&str; 13] = [
    "invalid",
    "unknown_client",
    "bad_signature",
    "batcher_duplicate",
    "batcher_full",
    "batcher_too_large",
    "batcher_wrong_shard",
    "batcher_other",
    "shard_full",
    "link_busy",
    "link_down",
    "no_answer",
    "internal",
];

/// The `reason` label of a request that was not acked: `invalid` (the router's own
/// checks), `unknown_client`, `bad_signature`, `batcher_<refusal>`, `shard_full`,
/// `link_busy`, `link_down`, `no_answer` or `internal`.
pub fn reason(e: &Error) -> &'static str {
    use crate::answer::BatcherRefusal;
    use crate::refusal::Refusal;
    use arma::admission::ContentError;
    match e {
        Error::Refused(Refusal::Content(ContentError::UnknownClient)) => "unknown_client",
        Error::Refused(Refusal::Content(ContentError::BadSignature)) => "bad_signature",
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
        | Error::Metrics(_)
        | Error::Serve(_)
        | Error::UnknownShard { .. }
        | Error::Internal(_) => "internal",
    }
}
