//! Prometheus metrics of an Arma consenter, under the prefix `fabrx_consenter_`
//! (docs/metrics.md), recorded by the decisions writer as it logs each decision the
//! engine delivers. The node's command gives the registry its constant `party` label.
//! A `last_decision` that stops moving on one consenter while it moves on the others
//! points at that replica (catching up, or cut off).

use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge, Registry};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wire::pb;

/// The metrics of one consenter.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Decisions the engine delivered and the writer recorded (a restart's WAL replay
    /// included).
    pub decisions: IntCounter,
    /// Block headers in those decisions.
    pub headers: IntCounter,
    /// Term changes in those decisions.
    pub term_changes: IntCounter,
    /// The number of the newest decision recorded.
    pub last_decision: IntGauge,
    /// Time between consecutive recorded decisions (how often the cluster decides).
    pub interval_seconds: Histogram,
    /// Block headers per decision (how many batches one consensus instance orders).
    pub headers_per_decision: Histogram,
    /// When the previous decision was recorded.
    previous: Arc<Mutex<Option<Instant>>>,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Metrics> {
        let m = Metrics::new()?;
        registry.register(Box::new(m.decisions.clone()))?;
        registry.register(Box::new(m.headers.clone()))?;
        registry.register(Box::new(m.term_changes.clone()))?;
        registry.register(Box::new(m.last_decision.clone()))?;
        registry.register(Box::new(m.interval_seconds.clone()))?;
        registry.register(Box::new(m.headers_per_decision.clone()))?;
        Ok(m)
    }

    /// Metrics that no registry exports (tests; [`Metrics::register`] for a node).
    pub fn new() -> prometheus::Result<Metrics> {
        Ok(Metrics {
            decisions: IntCounter::new(
                "fabrx_consenter_decisions_total",
                "Decisions delivered by the engine and recorded",
            )?,
            headers: IntCounter::new(
                "fabrx_consenter_headers_ordered_total",
                "Block headers in the recorded decisions",
            )?,
            term_changes: IntCounter::new(
                "fabrx_consenter_term_changes_total",
                "Term changes in the recorded decisions",
            )?,
            last_decision: IntGauge::new(
                "fabrx_consenter_last_decision",
                "Number of the newest decision recorded",
            )?,
            interval_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "fabrx_consenter_decision_interval_seconds",
                    "Time between consecutive recorded decisions",
                )
                .buckets(prometheus::exponential_buckets(0.0005, 2.0, 16)?),
            )?,
            headers_per_decision: Histogram::with_opts(
                HistogramOpts::new(
                    "fabrx_consenter_headers_per_decision",
                    "Block headers in each recorded decision",
                )
                .buckets(prometheus::exponential_buckets(1.0, 2.0, 10)?),
            )?,
            previous: Arc::new(Mutex::new(None)),
        })
    }

    /// Records one decision as served.
    pub(crate) fn on_decision(&self, d: &pb::Decision) {
        self.decisions.inc();
        self.headers.inc_by(d.headers.len() as u64);
        self.term_changes.inc_by(d.terms.len() as u64);
        self.last_decision
            .set(i64::try_from(d.number).unwrap_or(i64::MAX));
        self.headers_per_decision.observe(d.headers.len() as f64);
        let now = Instant::now();
        if let Ok(mut previous) = self.previous.lock()
            && let Some(before) = previous.replace(now)
        {
            self.interval_seconds
                .observe(now.duration_since(before).as_secs_f64());
        }
    }
}
