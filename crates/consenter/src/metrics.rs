//! Prometheus metrics of an Arma consenter, under the prefix `fabrx_consenter_`
//! (docs/metrics.md), recorded by the decisions writer as it logs each decision the
//! engine delivers. The node's command gives the registry its constant `party` label.
//! A `last_decision` that stops moving on one consenter while it moves on the others
//! points at that replica (catching up, or cut off).

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use telemetry::{Buckets, Registry};
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
    /// Requests waiting in the BFT replica to be ordered (sampled each second).
    pub pending_requests: IntGauge,
    /// The replica's current view.
    pub view: IntGauge,
    /// 1 while the replica waits for a new view, else 0.
    pub view_changing: IntGauge,
    /// The consenter set's epoch: config updates ordered since the genesis config (every
    /// consenter shows the same value once it applied the same decisions).
    pub config_epoch: IntGauge,
    /// Replicas in the consenter set in force (grows when a party joins).
    pub set_members: IntGauge,
    /// 1 while this replica is a member of the set in force (a joining party's replica
    /// shows 0 until the decision that adds it, docs/reconfiguration.md), else 0.
    pub member: IntGauge,
    /// Consensus messages from peers, by `outcome`: `received` (accepted into the
    /// engine) or `rejected` (bad signature, sender or size).
    pub messages: IntCounterVec,
    /// Consensus messages to peers, by `outcome`: `sent`, `deduplicated` (the same
    /// message was already queued for that peer) or `dropped` (the peer's outgoing
    /// queue was full).
    pub messages_out: IntCounterVec,
    /// When the previous decision was recorded.
    previous: Arc<Mutex<Option<Instant>>>,
}

impl Metrics {
    /// Makes the metrics in `registry` (a node's, or a detached one); every message
    /// outcome's series exists from the start.
    pub fn register(r: &Registry) -> Result<Metrics, telemetry::Error> {
        Ok(Metrics {
            decisions: r.counter(
                "decisions_total",
                "Decisions delivered by the engine and recorded",
            )?,
            headers: r.counter("headers_ordered_total", "Block headers in the recorded decisions")?,
            term_changes: r.counter("term_changes_total", "Term changes in the recorded decisions")?,
            last_decision: r.gauge("last_decision", "Number of the newest decision recorded")?,
            interval_seconds: r.histogram(
                "decision_interval_seconds",
                "Time between consecutive recorded decisions",
                Buckets::Call,
            )?,
            headers_per_decision: r.histogram(
                "headers_per_decision",
                "Block headers in each recorded decision",
                Buckets::Count,
            )?,
            pending_requests: r.gauge(
                "pending_requests",
                "Requests waiting in the BFT replica to be ordered",
            )?,
            view: r.gauge("view", "The BFT replica's current view")?,
            view_changing: r.gauge(
                "view_changing",
                "1 while the replica waits for a new view, else 0",
            )?,
            config_epoch: r.gauge(
                "config_epoch",
                "The consenter set's epoch: config updates ordered since the genesis config",
            )?,
            set_members: r.gauge("set_members", "Replicas in the consenter set in force")?,
            member: r.gauge(
                "member",
                "1 while this replica is a member of the consenter set in force, else 0",
            )?,
            messages: r.counter_by(
                "messages_in_total",
                "Consensus messages from peers, by outcome (received, rejected)",
                "outcome",
                &["received", "rejected"],
            )?,
            messages_out: r.counter_by(
                "messages_out_total",
                "Consensus messages to peers, by outcome (sent, deduplicated, dropped)",
                "outcome",
                &["sent", "deduplicated", "dropped"],
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

/// What [`Metrics::sample`] last saw of the transport counters, to add the difference.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Seen {
    received: u64,
    rejected: u64,
    sent: u64,
    deduplicated: u64,
    dropped: u64,
}

impl Metrics {
    /// Brings the gauges to `status` and the message counters to `stats`, given what
    /// the previous sample saw; returns what this one saw.
    pub(crate) fn sample(
        &self,
        status: &bft::shell::ShellStatus,
        stats: &crate::transport::Stats,
        seen: Seen,
    ) -> Seen {
        use crate::transport::Stats as S;
        self.pending_requests
            .set(i64::try_from(status.pending).unwrap_or(i64::MAX));
        self.view.set(i64::try_from(status.view).unwrap_or(i64::MAX));
        self.view_changing.set(i64::from(status.view_changing));
        self.config_epoch
            .set(i64::try_from(status.epoch).unwrap_or(i64::MAX));
        self.set_members.set(i64::from(status.members));
        self.member.set(i64::from(status.member));
        let now = Seen {
            received: S::get(&stats.received),
            rejected: S::get(&stats.rejected),
            sent: S::get(&stats.sent),
            deduplicated: S::get(&stats.deduplicated),
            dropped: S::get(&stats.dropped_outgoing),
        };
        let add = |vec: &IntCounterVec, outcome: &str, was: u64, is: u64| {
            vec.with_label_values(&[outcome]).inc_by(is.saturating_sub(was));
        };
        add(&self.messages, "received", seen.received, now.received);
        add(&self.messages, "rejected", seen.rejected, now.rejected);
        add(&self.messages_out, "sent", seen.sent, now.sent);
        add(
            &self.messages_out,
            "deduplicated",
            seen.deduplicated,
            now.deduplicated,
        );
        add(&self.messages_out, "dropped", seen.dropped, now.dropped);
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn samples_add_what_the_transport_counted_since_the_last_one() {
        let m = Metrics::register(&Registry::detached("consenter")).unwrap();
        let stats = crate::transport::Stats::default();
        let status = bft::shell::ShellStatus {
            view: 3,
            leader: 2,
            last_decided: 9,
            view_changing: true,
            pending: 17,
            epoch: 2,
            members: 4,
            member: true,
        };
        stats.received.store(5, Ordering::Relaxed);
        stats.sent.store(7, Ordering::Relaxed);
        let seen = m.sample(&status, &stats, Seen::default());
        stats.received.store(8, Ordering::Relaxed);
        stats.dropped_outgoing.store(2, Ordering::Relaxed);
        m.sample(&status, &stats, seen);
        let n = |v: &IntCounterVec, o: &str| v.with_label_values(&[o]).get();
        assert_eq!(n(&m.messages, "received"), 8);
        assert_eq!(n(&m.messages, "rejected"), 0);
        assert_eq!(n(&m.messages_out, "sent"), 7);
        assert_eq!(n(&m.messages_out, "dropped"), 2);
        assert_eq!(
            (
                m.pending_requests.get(),
                m.view.get(),
                m.view_changing.get(),
                m.config_epoch.get()
            ),
            (17, 3, 1, 2)
        );
    }
}
