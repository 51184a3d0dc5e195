//! The pool of requests waiting to be ordered, in arrival order.

use std::collections::{HashMap, VecDeque};

use crate::types::Digest;

#[derive(Debug)]
struct Entry {
    request: Vec<u8>,
    arrived_ms: u64,
    reforwarded: bool,
}

/// Pending requests keyed by digest, iterated in arrival order.
#[derive(Debug, Default)]
pub(super) struct Pending {
    order: VecDeque<Digest>,
    map: HashMap<Digest, Entry>,
    bytes: usize,
    /// Latest arrival time of a pending request that a decision served.
    served_arrival: u64,
    /// When a decision last served one of the pending requests.
    progress_ms: u64,
}

impl Pending {
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn contains(&self, d: &Digest) -> bool {
        self.map.contains_key(d)
    }

    /// Adds a request; false if it was already pending.
    pub(super) fn insert(&mut self, d: Digest, request: Vec<u8>, now: u64) -> bool {
        if self.map.contains_key(&d) {
            return false;
        }
        self.bytes += request.len();
        self.map.insert(
            d,
            Entry {
                request,
                arrived_ms: now,
                reforwarded: false,
            },
        );
        self.order.push_back(d);
        true
    }

    /// Removes a request (it was decided); returns when it arrived, if it was pending.
    pub(super) fn remove(&mut self, d: &Digest) -> Option<u64> {
        let arrived = self.map.remove(d).map(|e| {
            self.bytes -= e.request.len();
            e.arrived_ms
        });
        self.compact();
        arrived
    }

    /// A decision at `now` served pending requests, the latest of which arrived at
    /// `latest_arrival` (`None`: it served none of this replica's requests).
    pub(super) fn progress(&mut self, latest_arrival: Option<u64>, now: u64) {
        if let Some(latest) = latest_arrival {
            self.served_arrival = self.served_arrival.max(latest);
        }
        self.progress_ms = now;
    }

    /// When the censorship clock of the oldest pending request started, and its
    /// arrival. The clock runs from the arrival of a request that was skipped (a later
    /// one of this replica was decided first); otherwise from the later of its arrival
    /// and the last decision: while the leader keeps deciding, a backlog ordered first
    /// come, first served is not censorship (`check_normal_timers` still caps the
    /// total wait).
    pub(super) fn timer_start(&self) -> Option<(u64, u64)> {
        let oldest = self.oldest_ms()?;
        let start = if oldest < self.served_arrival {
            oldest
        } else {
            oldest.max(self.progress_ms)
        };
        Some((start, oldest))
    }

    /// Drops removed digests from the front of the order queue (lazy deletion), and
    /// rebuilds the queue when it is mostly garbage.
    fn compact(&mut self) {
        while let Some(d) = self.order.front() {
            if self.map.contains_key(d) {
                break;
            }
            self.order.pop_front();
        }
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order.retain(|d| map.contains_key(d));
        }
    }

    /// Arrival time of the oldest pending request.
    pub(super) fn oldest_ms(&self) -> Option<u64> {
        self.order
            .iter()
            .find_map(|d| self.map.get(d))
            .map(|e| e.arrived_ms)
    }

    /// Up to `max_count` requests / `max_bytes` bytes in arrival order (at least one
    /// if any is pending).
    pub(super) fn batch(&self, max_count: usize, max_bytes: usize) -> Vec<(Digest, Vec<u8>)> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for d in &self.order {
            let Some(e) = self.map.get(d) else { continue };
            if out.len() >= max_count || (!out.is_empty() && bytes + e.request.len() > max_bytes) {
                break;
            }
            bytes += e.request.len();
            out.push((*d, e.request.clone()));
        }
        out
    }

    /// Restarts every request's clock (a new leader gets a full timeout).
    pub(super) fn rebase(&mut self, now: u64) {
        for e in self.map.values_mut() {
            e.arrived_ms = now;
            e.reforwarded = false;
        }
        self.served_arrival = 0;
        self.progress_ms = now;
    }

    /// Requests older than `age_ms` not yet re-forwarded in this view; marks them.
    pub(super) fn take_stale(&mut self, now: u64, age_ms: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for d in &self.order {
            if let Some(e) = self.map.get_mut(d)
                && !e.reforwarded
                && now.saturating_sub(e.arrived_ms) >= age_ms
            {
                e.reforwarded = true;
                out.push(e.request.clone());
            }
        }
        out
    }
}
