//! Requests a client counts as submitted, and a correlated restart that loses them.
//!
//! With `correlated_restart`, a client stops sending a request once 2f+1 routers
//! acknowledged it (their batchers admitted it) and waits for it to be ordered; only when
//! it is not ordered `STATUS_TIMEOUT_MS` after GST does it submit it again, as a client
//! whose commit status times out does. Before GST f+1 correct batchers of shard 0 (the
//! term's primary among them) crash at the same moment and restart with empty pending
//! queues: a request acknowledged only by them and by Byzantine ones is gone. The run
//! reports how many acknowledged requests were still unordered at the status timeout
//! (`lost_after_ack`); every request must be ordered within the liveness bound all the
//! same, and duplicates (a request ordered twice) are counted.

use std::collections::BTreeSet;
use std::sync::Arc;

use rand::Rng;

use super::{Ev, World};

/// How long after GST a client waits for an acknowledged request to be ordered before it
/// submits it again (ms).
pub const STATUS_TIMEOUT_MS: u64 = 10_000;

impl World {
    /// Schedules the correlated crash, when the scenario has one.
    pub(super) fn build_correlated(&mut self) {
        if self.sc.correlated_restart {
            let gst = self.sc.gst_ms.max(3);
            let at = self.k.rng().gen_range(gst / 3..gst * 2 / 3 + 1);
            self.k.schedule(at, Ev::CorrelatedCrash);
        }
        if self.sc.acked_clients() {
            self.k.schedule(
                self.sc.gst_ms.saturating_add(STATUS_TIMEOUT_MS),
                Ev::StatusTimeout,
            );
        }
    }

    /// Batcher `b`'s party admitted `digest` (its router acknowledges the request).
    pub(super) fn on_admitted(&mut self, b: usize, digest: batcher::RequestDigest) {
        if !self.sc.acked_clients() {
            return;
        }
        let party = self.batchers[b].party;
        if let Some(request) = self.by_digest.get(&digest).cloned() {
            self.acks.entry(Arc::clone(&request)).or_default().insert(party);
            if self.acks_in_force(&request) >= types::quorum::client_acks(self.in_force.len()) {
                self.acked.insert(request);
            }
        }
    }

    /// The routers of parties in force that acknowledged `request`.
    pub(super) fn acks_in_force(&self, request: &Arc<[u8]>) -> usize {
        self.acks.get(request).map_or(0, |parties: &BTreeSet<u32>| {
            parties.iter().filter(|p| self.in_force.contains(p)).count()
        })
    }

    /// Whether its client counts `request` as acknowledged (and stops sending it): 2f+1
    /// routers of the parties in force acknowledged it. A switch that removes a party can
    /// take that back (`on_parties_changed`).
    pub(super) fn acknowledged(&self, request: &Arc<[u8]>) -> bool {
        self.acked.contains(request)
    }

    /// f+1 correct batchers of shard 0 crash at once: the first f+1 correct parties'.
    pub(super) fn correlated_crash(&mut self) {
        if self.k.after_gst() {
            return;
        }
        let f1 = ((self.sc.n - 1) / 3 + 1) as usize;
        let victims: Vec<usize> = (1..=self.sc.n)
            .filter(|p| self.byz(*p).is_none())
            .take(f1)
            .map(|p| self.b_index(p, 0))
            .collect();
        self.report.correlated_acked = self
            .requests
            .iter()
            .filter(|r| self.acknowledged(r) && !self.checker.is_ordered(r))
            .count() as u64;
        for b in victims {
            self.crash_batcher(b);
        }
    }

    /// The clients' status timeout: acknowledged requests not ordered are sent again. In
    /// a reconfiguration scenario where no correct batcher crashed, an acknowledged
    /// request is held by f+1 correct batchers at least, across every switch: one still
    /// unordered now was lost.
    pub(super) fn status_timeout(&mut self) -> Result<(), String> {
        let (missing, _) = self.checker.unordered_and_duplicates();
        if self.reconf.is_some() && self.report.batcher_crashes == 0 {
            let lost = missing.iter().filter(|r| self.acknowledged(r)).count();
            if lost > 0 {
                return Err(format!(
                    "acknowledged requests lost: {lost} acknowledged by 2f+1 routers are not ordered {STATUS_TIMEOUT_MS} ms \
                     after GST, and no correct batcher crashed ({} switches so far)",
                    self.checker.switches.as_ref().map_or(0, |s| s.switched.len())
                ));
            }
        }
        for request in missing {
            self.report.lost_after_ack += 1;
            self.k.schedule_in(1, Ev::Client(request));
        }
        Ok(())
    }
}
