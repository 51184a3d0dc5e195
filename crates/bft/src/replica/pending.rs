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

    pub(super) fn remove(&mut self, d: &Digest) {
        if let Some(e) = self.map.remove(d) {
            self.bytes -= e.request.len();
        }
        self.compact();
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
