//! Prometheus metrics of a batcher, under the prefix `fabrx_batcher_` (docs/metrics.md):
//! [`Stats`] read at each scrape, so the node pays only its atomic counters. The node's
//! command gives the registry its constant `party` and `shard` labels. The mempool
//! gauges show a primary that cannot cut fast enough; unordered batches at the bound
//! show consenters or secondaries that lag.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus::Registry;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Counter, Gauge, Histogram, Metric, MetricFamily, MetricType};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{Stats, StatsSnapshot};

/// Upper bounds of [`LatencyBuckets`], seconds: 1 ms doubling to about 33 s.
const BOUNDS: [f64; 16] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384,
    32.768,
];

/// A latency histogram of atomics, exported as a Prometheus histogram at scrape time.
#[derive(Debug, Default)]
pub struct LatencyBuckets {
    /// Observations at or below each bound (not cumulative; the scrape adds them up).
    counts: [AtomicU64; 16],
    total: AtomicU64,
    sum_micros: AtomicU64,
}

impl LatencyBuckets {
    /// Records one latency.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = BOUNDS.iter().position(|b| secs <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.total.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .sum_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                Some(s.saturating_add(micros))
            });
    }

    fn family(&self, name: &str, help: &str) -> MetricFamily {
        let mut h = Histogram::default();
        let mut cumulative = 0u64;
        let buckets = BOUNDS
            .iter()
            .zip(&self.counts)
            .map(|(bound, c)| {
                cumulative = cumulative.saturating_add(c.load(Ordering::Relaxed));
                let mut b = Bucket::default();
                b.set_upper_bound(*bound);
                b.set_cumulative_count(cumulative);
                b
            })
            .collect();
        h.set_bucket(buckets);
        h.set_sample_count(self.total.load(Ordering::Relaxed));
        h.set_sample_sum(self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let mut metric = Metric::default();
        metric.set_histogram(h);
        let mut family = MetricFamily::default();
        family.set_name(name.into());
        family.set_help(help.into());
        family.set_field_type(MetricType::HISTOGRAM);
        family.set_metric(vec![metric]);
        family
    }
}

/// The name and help of the batch ordering latency.
const ORDER_SECONDS: (&str, &str) = (
    "fabrx_batcher_batch_order_seconds",
    "Time from a batch persisted here to its decision",
);

/// Whether a metric only grows (a counter) or goes up and down (a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// One exported metric: its name, help, kind and where its value comes from.
struct Entry {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    value: fn(&StatsSnapshot) -> u64,
}

const ENTRIES: &[Entry] = &[
    Entry {
        name: "fabrx_batcher_mempool_requests",
        help: "Requests pending in the mempool",
        kind: Kind::Gauge,
        value: |s| s.pending,
    },
    Entry {
        name: "fabrx_batcher_mempool_bytes",
        help: "Bytes of the requests pending in the mempool",
        kind: Kind::Gauge,
        value: |s| s.pending_bytes,
    },
    Entry {
        name: "fabrx_batcher_in_flight_requests",
        help: "Requests in unordered batches of the term",
        kind: Kind::Gauge,
        value: |s| s.in_flight,
    },
    Entry {
        name: "fabrx_batcher_in_flight_bytes",
        help: "Bytes of the requests in unordered batches of the term",
        kind: Kind::Gauge,
        value: |s| s.in_flight_bytes,
    },
    Entry {
        name: "fabrx_batcher_unordered_batches",
        help: "Unordered batches of the term",
        kind: Kind::Gauge,
        value: |s| s.unordered_batches,
    },
    Entry {
        name: "fabrx_batcher_term",
        help: "The shard's current term",
        kind: Kind::Gauge,
        value: |s| s.term,
    },
    Entry {
        name: "fabrx_batcher_term_changes_total",
        help: "Term changes seen since the node started",
        kind: Kind::Counter,
        value: |s| s.term_changes,
    },
    Entry {
        name: "fabrx_batcher_requests_admitted_total",
        help: "Router requests admitted to the mempool",
        kind: Kind::Counter,
        value: |s| s.admitted,
    },
    Entry {
        name: "fabrx_batcher_requests_refused_total",
        help: "Router requests refused",
        kind: Kind::Counter,
        value: |s| s.refused,
    },
    Entry {
        name: "fabrx_batcher_batches_cut_total",
        help: "Batches cut as primary",
        kind: Kind::Counter,
        value: |s| s.batches_cut,
    },
    Entry {
        name: "fabrx_batcher_batches_accepted_total",
        help: "Batches accepted as secondary",
        kind: Kind::Counter,
        value: |s| s.batches_accepted,
    },
    Entry {
        name: "fabrx_batcher_batches_persisted_total",
        help: "Batches appended to the batch store and synced",
        kind: Kind::Counter,
        value: |s| s.batches_persisted,
    },
    Entry {
        name: "fabrx_batcher_batches_rejected_total",
        help: "Pulled batches that failed verification",
        kind: Kind::Counter,
        value: |s| s.batches_rejected,
    },
    Entry {
        name: "fabrx_batcher_bafs_sent_total",
        help: "BAFs handed to the consenter submitter",
        kind: Kind::Counter,
        value: |s| s.bafs_sent,
    },
    Entry {
        name: "fabrx_batcher_complaints_sent_total",
        help: "Complaints handed to the consenter submitter",
        kind: Kind::Counter,
        value: |s| s.complaints,
    },
    Entry {
        name: "fabrx_batcher_submits_dropped_total",
        help: "BAFs and complaints given up (ordered, or their term over)",
        kind: Kind::Counter,
        value: |s| s.submits_dropped,
    },
    Entry {
        name: "fabrx_batcher_decisions_total",
        help: "Decisions of the own consenter fed to the core",
        kind: Kind::Counter,
        value: |s| s.decisions,
    },
    Entry {
        name: "fabrx_batcher_ordered_batches_total",
        help: "Ordered batches of the shard fed to the core",
        kind: Kind::Counter,
        value: |s| s.ordered_batches,
    },
    Entry {
        name: "fabrx_batcher_fetched_batches_total",
        help: "Ordered batches fetched from other batchers",
        kind: Kind::Counter,
        value: |s| s.fetched_batches,
    },
];

/// The batcher's metrics: a collector over a node's [`Stats`].
pub struct Metrics {
    stats: Arc<Stats>,
    descs: Vec<Desc>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// A collector of `stats` (a running node's [`super::Handle::stats`]).
    pub fn new(stats: Arc<Stats>) -> prometheus::Result<Metrics> {
        let mut descs = ENTRIES
            .iter()
            .map(|e| Desc::new(e.name.into(), e.help.into(), Vec::new(), HashMap::new()))
            .collect::<prometheus::Result<Vec<_>>>()?;
        descs.push(Desc::new(
            ORDER_SECONDS.0.into(),
            ORDER_SECONDS.1.into(),
            Vec::new(),
            HashMap::new(),
        )?);
        Ok(Metrics { stats, descs })
    }

    /// Registers a collector of `stats` in `registry`.
    pub fn register(registry: &Registry, stats: Arc<Stats>) -> prometheus::Result<()> {
        registry.register(Box::new(Metrics::new(stats)?))
    }

    /// Every metric's name and value now (what a scrape would read).
    pub fn values(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats.snapshot();
        ENTRIES.iter().map(|e| (e.name, (e.value)(&s))).collect()
    }
}

impl Collector for Metrics {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let s = self.stats.snapshot();
        ENTRIES
            .iter()
            .map(|e| {
                let value = (e.value)(&s) as f64;
                let mut metric = Metric::default();
                let kind = match e.kind {
                    Kind::Counter => {
                        let mut c = Counter::default();
                        c.set_value(value);
                        metric.set_counter(c);
                        MetricType::COUNTER
                    }
                    Kind::Gauge => {
                        let mut g = Gauge::default();
                        g.set_value(value);
                        metric.set_gauge(g);
                        MetricType::GAUGE
                    }
                };
                let mut family = MetricFamily::default();
                family.set_name(e.name.into());
                family.set_help(e.help.into());
                family.set_field_type(kind);
                family.set_metric(vec![metric]);
                family
            })
            .chain(std::iter::once(
                self.stats.order_latency.family(ORDER_SECONDS.0, ORDER_SECONDS.1),
            ))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_scrape_reads_the_counters_with_their_kinds() {
        let stats = Arc::new(Stats::default());
        let registry = Registry::new();
        Metrics::register(&registry, Arc::clone(&stats)).expect("registers");
        stats.pending_bytes.store(300, Ordering::Relaxed);
        super::super::bump(&stats.bafs_sent);
        super::super::bump(&stats.bafs_sent);
        stats.order_latency.observe(Duration::from_millis(3));
        stats.order_latency.observe(Duration::from_millis(700));
        let families = registry.gather();
        let mut text = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &families, &mut text).expect("encodes");
        let text = String::from_utf8(text).expect("utf-8");
        for line in [
            "# TYPE fabrx_batcher_mempool_bytes gauge",
            "fabrx_batcher_mempool_bytes 300",
            "# TYPE fabrx_batcher_bafs_sent_total counter",
            "fabrx_batcher_bafs_sent_total 2",
            "fabrx_batcher_batches_persisted_total 0",
            "# TYPE fabrx_batcher_batch_order_seconds histogram",
            "fabrx_batcher_batch_order_seconds_bucket{le=\"0.002\"} 0",
            "fabrx_batcher_batch_order_seconds_bucket{le=\"0.004\"} 1",
            "fabrx_batcher_batch_order_seconds_bucket{le=\"1.024\"} 2",
            "fabrx_batcher_batch_order_seconds_bucket{le=\"+Inf\"} 2",
            "fabrx_batcher_batch_order_seconds_sum 0.703",
            "fabrx_batcher_batch_order_seconds_count 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        assert_eq!(families.len(), ENTRIES.len() + 1);
    }
}
