//! Prometheus metrics of a query service (`fabrx_query_*`).

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

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

impl Metrics {
    /// Registers the metrics in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Metrics> {
        let requests = IntCounterVec::new(
            Opts::new(
                "fabrx_query_requests_total",
                "Query requests answered, by RPC and outcome",
            ),
            &["rpc", "outcome"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new("fabrx_query_latency_seconds", "Query latency, by RPC")
                .buckets(prometheus::exponential_buckets(0.0001, 2.0, 16)?),
            &["rpc"],
        )?;
        let in_flight = IntGauge::new("fabrx_query_in_flight", "Query requests served or waiting")?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        Ok(Metrics {
            requests,
            latency,
            in_flight,
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
