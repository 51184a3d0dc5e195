//! The pool of requests waiting to be ordered, in arrival order.
//!
//! The order queue deletes lazily: a removed request's entry stays in the queue until
//! it reaches the front. A request can be removed (decided) and later inserted again
//! (its digest forgotten once its decision fell below the checkpoint window, and a
//! batcher resent it), so each insertion gets a ticket, and a queue entry counts only
//! while its ticket is the request's current one. Without that, the stale entry and
//! the new one both name the live request and a leader proposes it twice in one batch,
//! which every follower refuses, in every view.

use std::collections::{HashMap, VecDeque};

use crate::types::Digest;

#[derive(Debug)]
struct Entry {
    request: Vec<u8>,
    arrived_ms: u64,
    /// When this replica last forwarded it (`None`: not since it arrived or the view
    /// began).
    forwarded_ms: Option<u64>,
    /// When a follower forwards this client request to the leader for the first time,
    /// if it is still pending then (`None`: not to be forwarded, or already was).
    forward_at: Option<u64>,
    /// The insertion this entry came from; matches exactly one queue entry.
    ticket: u64,
}

/// Pending requests keyed by digest, iterated in arrival order.
#[derive(Debug, Default)]
pub(super) struct Pending {
    order: VecDeque<(Digest, u64)>,
    /// Requests waiting for their first forward: `(forward_at, digest, ticket)` in
    /// arrival order (deleted lazily, like `order`).
    forwards: VecDeque<(u64, Digest, u64)>,
    next_ticket: u64,
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

    /// Adds a request; false if it was already pending. `forward_at`: when to forward
    /// it to the leader if it is still pending then ([`Pending::take_due_forwards`]).
    pub(super) fn insert(&mut self, d: Digest, request: Vec<u8>, now: u64, forward_at: Option<u64>) -> bool {
        if self.map.contains_key(&d) {
            return false;
        }
        self.bytes += request.len();
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.map.insert(
            d,
            Entry {
                request,
                arrived_ms: now,
                forwarded_ms: None,
                forward_at,
                ticket,
            },
        );
        self.order.push_back((d, ticket));
        if let Some(at) = forward_at {
            self.forwards.push_back((at, d, ticket));
        }
        true
    }

    /// When the next first forward may be due (possibly earlier: the front entry may
    /// be a request that was decided meanwhile).
    pub(super) fn next_forward(&self) -> Option<u64> {
        self.forwards.front().map(|(at, _, _)| *at)
    }

    /// The requests whose first forward is due at `now` and that are still pending, in
    /// arrival order; they are not returned again.
    pub(super) fn take_due_forwards(&mut self, now: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some((at, d, ticket)) = self.forwards.front().copied() {
            if at > now {
                break;
            }
            self.forwards.pop_front();
            if let Some(e) = self.map.get_mut(&d)
                && e.ticket == ticket
                && e.forward_at.take().is_some()
            {
                out.push(e.request.clone());
            }
        }
        out
    }

    /// The live entry a queue entry names, if it is not a leftover of an earlier
    /// insertion of the same request.
    fn live(&self, (d, ticket): &(Digest, u64)) -> Option<&Entry> {
        self.map.get(d).filter(|e| e.ticket == *ticket)
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

    /// Keeps only the requests `keep` accepts (the application's verdicts changed: a new
    /// replica set and config are in force); returns how many were dropped.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) -> usize {
        let before = self.map.len();
        let mut bytes = self.bytes;
        self.map.retain(|_, e| {
            let kept = keep(&e.request);
            if !kept {
                bytes -= e.request.len();
            }
            kept
        });
        self.bytes = bytes;
        self.compact();
        before - self.map.len()
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
        while let Some(front) = self.order.front() {
            if self.live(front).is_some() {
                break;
            }
            self.order.pop_front();
        }
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order
                .retain(|(d, ticket)| map.get(d).is_some_and(|e| e.ticket == *ticket));
        }
        if self.forwards.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.forwards
                .retain(|(_, d, ticket)| map.get(d).is_some_and(|e| e.ticket == *ticket));
        }
    }

    /// Arrival time of the oldest pending request.
    pub(super) fn oldest_ms(&self) -> Option<u64> {
        self.order.iter().find_map(|q| self.live(q)).map(|e| e.arrived_ms)
    }

    /// Up to `max_count` requests / `max_bytes` bytes in arrival order (at least one
    /// if any is pending).
    pub(super) fn batch(&self, max_count: usize, max_bytes: usize) -> Vec<(Digest, Vec<u8>)> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for q in &self.order {
            let Some(e) = self.live(q) else { continue };
            if out.len() >= max_count || (!out.is_empty() && bytes + e.request.len() > max_bytes) {
                break;
            }
            bytes += e.request.len();
            out.push((q.0, e.request.clone()));
        }
        out
    }

    /// Restarts every request's clock (a new leader gets a full timeout).
    pub(super) fn rebase(&mut self, now: u64) {
        for e in self.map.values_mut() {
            e.arrived_ms = now;
            e.forwarded_ms = None;
        }
        self.served_arrival = 0;
        self.progress_ms = now;
    }

    /// Requests older than `age_ms` not yet re-forwarded in this view; marks them.
    pub(super) fn take_stale(&mut self, now: u64, age_ms: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for (d, ticket) in &self.order {
            if let Some(e) = self.map.get_mut(d)
                && e.ticket == *ticket
                && e.forwarded_ms.is_none()
                && now.saturating_sub(e.arrived_ms) >= age_ms
            {
                e.forwarded_ms = Some(now);
                e.forward_at = None;
                out.push(e.request.clone());
            }
        }
        out
    }

    /// Requests not forwarded for `every_ms` (or never), in arrival order, up to
    /// `max_bytes` (at least one); marks them forwarded now.
    pub(super) fn take_for_resend(&mut self, now: u64, every_ms: u64, max_bytes: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for (d, ticket) in &self.order {
            if let Some(e) = self.map.get_mut(d)
                && e.ticket == *ticket
                && e.forwarded_ms.is_none_or(|t| now.saturating_sub(t) >= every_ms)
            {
                if !out.is_empty() && bytes.saturating_add(e.request.len()) > max_bytes {
                    break;
                }
                bytes = bytes.saturating_add(e.request.len());
                e.forwarded_ms = Some(now);
                out.push(e.request.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(b: u8) -> Digest {
        Digest::of_request(&[b])
    }

    #[test]
    fn a_request_removed_and_inserted_again_is_batched_once() {
        let mut p = Pending::default();
        for b in 0..3 {
            assert!(p.insert(d(b), vec![b], u64::from(b), None));
        }
        // Request 1 is decided while request 0 still waits: its queue entry stays.
        assert!(p.remove(&d(1)).is_some());
        // Later the same request comes again (its digest forgotten after pruning).
        assert!(p.insert(d(1), vec![1], 10, None));
        let batch: Vec<Vec<u8>> = p.batch(10, 1 << 20).into_iter().map(|(_, r)| r).collect();
        assert_eq!(batch, vec![vec![0], vec![2], vec![1]]);
        assert_eq!(
            p.take_stale(100, 0).len(),
            3,
            "each live request re-forwarded once"
        );
        assert_eq!(p.len(), 3);
        assert_eq!(p.oldest_ms(), Some(0));
    }

    #[test]
    fn requests_are_resent_once_per_period_within_the_byte_budget() {
        let mut p = Pending::default();
        for b in 0..4 {
            assert!(p.insert(d(b), vec![b; 10], 0, None));
        }
        // A budget of 25 bytes: two requests of 10 (the third would pass it).
        let first = p.take_for_resend(100, 1000, 25);
        assert_eq!(first, vec![vec![0; 10], vec![1; 10]]);
        let second = p.take_for_resend(100, 1000, 25);
        assert_eq!(
            second,
            vec![vec![2; 10], vec![3; 10]],
            "the rest, not the same again"
        );
        assert!(
            p.take_for_resend(500, 1000, 1 << 20).is_empty(),
            "within the period"
        );
        assert_eq!(p.take_for_resend(1100, 1000, 1 << 20).len(), 4, "a period later");
        // At least one request, however small the budget.
        assert_eq!(p.take_for_resend(2100, 1000, 0).len(), 1);
        // One forwarded to the leader is not forwarded to it again in the view.
        assert!(p.take_stale(2100, 0).is_empty());
    }

    #[test]
    fn a_first_forward_is_due_once_and_only_while_pending() {
        let mut p = Pending::default();
        assert!(p.insert(d(1), vec![1], 0, Some(40)));
        assert!(p.insert(d(2), vec![2], 5, Some(45)));
        assert!(p.insert(d(3), vec![3], 6, None));
        assert_eq!(p.next_forward(), Some(40));
        assert!(p.take_due_forwards(39).is_empty(), "not yet due");
        assert!(p.remove(&d(2)).is_some(), "decided before its forward");
        assert_eq!(p.take_due_forwards(100), vec![vec![1]]);
        assert!(p.take_due_forwards(200).is_empty(), "each at most once");
        assert_eq!(p.next_forward(), None);
    }

    #[test]
    fn stale_entries_are_dropped_as_they_reach_the_front() {
        let mut p = Pending::default();
        for round in 0..200u64 {
            assert!(p.insert(d(7), vec![7], round, None));
            assert!(p.insert(d(8), vec![8], round, None));
            assert!(p.remove(&d(8)).is_some());
            assert!(p.remove(&d(7)).is_some());
        }
        assert_eq!(p.len(), 0);
        assert!(p.order.is_empty(), "queue keeps {} stale entries", p.order.len());
        assert_eq!(p.bytes(), 0);
    }
}
