//! Prometheus metrics of a query service (`fabrx_query_*`).

use prometheus::{HistogramVec, IntCounterVec, IntGauge};
use telemetry::{Buckets, Registry};

/// A query service's metrics.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Requests answered, by RPC (`rows`, `owned`, `status`) and outcome (`ok` or the
    /// gRPC code's name).
    pub requests: IntCounterVec,
    /// Seconds from a request's arrival to its answer, by RPC.
    pub latency: HistogramVec,
    /// Requests being served or waiting for their turn.
    pub in_flight: IntGauge,
}

/// The RPCs, as the `rpc` label names them.
pub const RPCS: [&str; 3] = ["rows", "owned", "status"];

impl Metrics {
    /// Makes the metrics in `registry`; every RPC's `ok` series exists from the start.
    pub fn register(r: &Registry) -> Result<Metrics, telemetry::Error> {
        let ok: Vec<[&str; 2]> = RPCS.iter().map(|rpc| [*rpc, "ok"]).collect();
        let ok: Vec<&[&str]> = ok.iter().map(|row| &row[..]).collect();
        Ok(Metrics {
            requests: r.counter_vec(
                "requests_total",
                "Query requests answered, by RPC and outcome",
                &["rpc", "outcome"],
                &ok,
            )?,
            latency: r.histogram_vec(
                "latency_seconds",
                "Query latency, by RPC",
                &["rpc"],
                Buckets::Call,
                &RPCS.iter().map(std::slice::from_ref).collect::<Vec<_>>(),
            )?,
            in_flight: r.gauge("in_flight", "Query requests served or waiting")?,
        })
    }

    /// Records one answered request.
    pub fn observe<T>(&self, rpc: &str, seconds: f64, outcome: &Result<T, tonic::Status>) {
        let code = match outcome {
            Ok(_) => "ok".to_string(),
            Err(s) => format!("{:?}", s.code()),
        };
        self.requests.with_label_values(&[rpc, &code]).inc();
        self.latency.with_label_values(&[rpc]).observe(seconds);
    }
}
