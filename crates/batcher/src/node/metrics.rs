//! A batcher's metrics, under the prefix `fabrx_batcher_` (docs/metrics.md): [`Stats`],
//! the counters and gauges the node keeps, made in the node's registry (the node's
//! command gives it the constant `party` and `shard` labels). The mempool gauges show a
//! primary that cannot cut fast enough; unordered batches at the bound show consenters
//! or secondaries that lag.

use super::StatsSnapshot;
use prometheus::{Histogram, IntCounter, IntGauge};
use telemetry::{Buckets, Registry};

/// The counters and gauges of a running node.
#[derive(Debug, Clone)]
pub struct Stats {
    pub(super) pending: IntGauge,
    pub(super) pending_bytes: IntGauge,
    pub(super) in_flight: IntGauge,
    pub(super) in_flight_bytes: IntGauge,
    pub(super) unordered_batches: IntGauge,
    pub(super) term: IntGauge,
    pub(super) term_changes: IntCounter,
    pub(super) batches_cut: IntCounter,
    pub(super) batches_persisted: IntCounter,
    pub(super) batches_accepted: IntCounter,
    pub(super) batches_rejected: IntCounter,
    pub(super) batches_restored: IntCounter,
    pub(super) admitted: IntCounter,
    pub(super) refused: IntCounter,
    pub(super) intake_messages: IntCounter,
    pub(super) bafs_sent: IntCounter,
    pub(super) complaints: IntCounter,
    pub(super) submits_dropped: IntCounter,
    pub(super) decisions: IntCounter,
    pub(super) ordered_batches: IntCounter,
    pub(super) fetched_batches: IntCounter,
    pub(super) pulled_checked: IntCounter,
    pub(super) pulled_known: IntCounter,
    pub(super) pulled_compact: IntCounter,
    pub(super) compact_fallbacks: IntCounter,
    /// Time from a batch persisted here to the decision that orders it.
    pub(super) order_latency: Histogram,
}

impl Stats {
    /// Makes the metrics in `registry` (a node's, or a detached one).
    pub fn register(r: &Registry) -> Result<Stats, telemetry::Error> {
        Ok(Stats {
            pending: r.gauge("mempool_requests", "Requests pending in the mempool")?,
            pending_bytes: r.gauge("mempool_bytes", "Bytes of the requests pending in the mempool")?,
            in_flight: r.gauge("in_flight_requests", "Requests in unordered batches of the term")?,
            in_flight_bytes: r.gauge(
                "in_flight_bytes",
                "Bytes of the requests in unordered batches of the term",
            )?,
            unordered_batches: r.gauge("unordered_batches", "Unordered batches of the term")?,
            term: r.gauge("term", "The shard's current term")?,
            term_changes: r.counter("term_changes_total", "Term changes seen since the node started")?,
            batches_cut: r.counter("batches_cut_total", "Batches cut as primary")?,
            batches_persisted: r.counter(
                "batches_persisted_total",
                "Batches appended to the batch store and synced",
            )?,
            batches_accepted: r.counter("batches_accepted_total", "Batches accepted as secondary")?,
            batches_rejected: r.counter(
                "batches_rejected_total",
                "Pulled batches that failed verification",
            )?,
            batches_restored: r.counter(
                "batches_restored_total",
                "Batches re-adopted from the batch store at start",
            )?,
            admitted: r.counter(
                "requests_admitted_total",
                "Router requests admitted to the mempool",
            )?,
            refused: r.counter("requests_refused_total", "Router requests refused")?,
            intake_messages: r.counter(
                "intake_messages_total",
                "Intake messages read from the router (each carries many requests)",
            )?,
            bafs_sent: r.counter("bafs_sent_total", "BAFs handed to the consenter submitter")?,
            complaints: r.counter(
                "complaints_sent_total",
                "Complaints handed to the consenter submitter",
            )?,
            submits_dropped: r.counter(
                "submits_dropped_total",
                "BAFs and complaints given up (ordered, or their term over)",
            )?,
            decisions: r.counter(
                "decisions_total",
                "Decisions of the own consenter fed to the core",
            )?,
            ordered_batches: r.counter(
                "ordered_batches_total",
                "Ordered batches of the shard fed to the core",
            )?,
            fetched_batches: r.counter(
                "fetched_batches_total",
                "Ordered batches fetched from other batchers",
            )?,
            pulled_checked: r.counter(
                "pulled_requests_checked_total",
                "Requests of pulled batches whose content was checked here",
            )?,
            pulled_known: r.counter(
                "pulled_requests_known_total",
                "Requests of pulled batches not checked again: this party's router admitted the same bytes",
            )?,
            pulled_compact: r.counter(
                "pulled_compact_batches_total",
                "Compact batches (request digests) pulled from the primary",
            )?,
            compact_fallbacks: r.counter(
                "compact_fallbacks_total",
                "Compact batches that could not be rebuilt from the pending requests, fetched whole",
            )?,
            order_latency: r.histogram(
                "batch_order_seconds",
                "Time from a batch persisted here to its decision",
                Buckets::Stage,
            )?,
        })
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let g = |v: &IntGauge| u64::try_from(v.get()).unwrap_or(0);
        StatsSnapshot {
            pending: g(&self.pending),
            pending_bytes: g(&self.pending_bytes),
            in_flight: g(&self.in_flight),
            in_flight_bytes: g(&self.in_flight_bytes),
            unordered_batches: g(&self.unordered_batches),
            term: g(&self.term),
            term_changes: self.term_changes.get(),
            batches_cut: self.batches_cut.get(),
            batches_persisted: self.batches_persisted.get(),
            batches_accepted: self.batches_accepted.get(),
            batches_rejected: self.batches_rejected.get(),
            batches_restored: self.batches_restored.get(),
            admitted: self.admitted.get(),
            refused: self.refused.get(),
            intake_messages: self.intake_messages.get(),
            bafs_sent: self.bafs_sent.get(),
            complaints: self.complaints.get(),
            submits_dropped: self.submits_dropped.get(),
            decisions: self.decisions.get(),
            ordered_batches: self.ordered_batches.get(),
            fetched_batches: self.fetched_batches.get(),
            pulled_checked: self.pulled_checked.get(),
            pulled_known: self.pulled_known.get(),
            pulled_compact: self.pulled_compact.get(),
            compact_fallbacks: self.compact_fallbacks.get(),
        }
    }
}

/// A gauge's value from a count, saturating.
pub(super) fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_reads_the_counters_with_their_kinds() {
        let registry = Registry::detached("batcher");
        let stats = Stats::register(&registry).expect("registers");
        stats.pending_bytes.set(300);
        super::super::bump(&stats.bafs_sent);
        super::super::bump(&stats.bafs_sent);
        stats.order_latency.observe(0.003);
        stats.order_latency.observe(0.7);
        let text = registry.text();
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
        assert_eq!(stats.snapshot().bafs_sent, 2);
        assert_eq!(stats.snapshot().pending_bytes, 300);
    }
}
