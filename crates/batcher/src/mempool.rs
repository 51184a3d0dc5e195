//! The pending requests of one batcher, in arrival order, deduplicated by digest, and the
//! bounded memory of recently ordered request digests.
//!
//! The mempool itself does not refuse: the core checks the bounds before every insertion
//! (`Batcher::admit`), so that a refusal is answered to the router with its reason.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use crate::messages::{Request, RequestDigest};
use types::PartyId;

/// One pending request.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// Its digest.
    pub digest: RequestDigest,
    /// Its bytes.
    pub request: Request,
    /// When it arrived (or came back after a term change), in ms.
    pub arrival_ms: u64,
    /// The party that forwarded it to this primary (`None`: its own router, or given
    /// back after a term change).
    pub forwarder: Option<PartyId>,
}

/// Pending requests ordered by an insertion key: appended ones take keys counting up
/// from the middle of the `u64` range, requests given back after a term change take keys
/// counting down from it, so they are cut first.
#[derive(Debug)]
pub(crate) struct Mempool {
    order: BTreeMap<u64, Entry>,
    keys: HashMap<RequestDigest, u64, arma::DigestHash>,
    bytes: u64,
    /// Pending requests by the party that forwarded them.
    forwarded: HashMap<PartyId, usize>,
    next_back: u64,
    next_front: u64,
}

const MIDDLE: u64 = 1 << 63;

impl Mempool {
    pub(crate) fn new() -> Mempool {
        Mempool {
            order: BTreeMap::new(),
            keys: HashMap::default(),
            bytes: 0,
            forwarded: HashMap::new(),
            next_back: MIDDLE,
            next_front: MIDDLE - 1,
        }
    }

    /// Number of pending requests.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// Bytes of pending requests.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn contains(&self, digest: &RequestDigest) -> bool {
        self.keys.contains_key(digest)
    }

    /// The pending request with this digest.
    pub(crate) fn get(&self, digest: &RequestDigest) -> Option<&Request> {
        let key = self.keys.get(digest)?;
        self.order.get(key).map(|e| &e.request)
    }

    /// Pending requests that `party` forwarded.
    pub(crate) fn forwarded_by(&self, party: PartyId) -> usize {
        self.forwarded.get(&party).copied().unwrap_or(0)
    }

    fn insert(&mut self, key: u64, entry: Entry) {
        self.bytes = self.bytes.saturating_add(entry.request.len() as u64);
        if let Some(p) = entry.forwarder {
            *self.forwarded.entry(p).or_default() += 1;
        }
        self.keys.insert(entry.digest, key);
        self.order.insert(key, entry);
    }

    /// Appends a request (the caller checked dedup and bounds).
    pub(crate) fn push_back(&mut self, entry: Entry) {
        let key = self.next_back;
        self.next_back = self.next_back.saturating_add(1);
        self.insert(key, entry);
    }

    /// Puts a request before every other (the caller checked dedup and bounds).
    pub(crate) fn push_front(&mut self, entry: Entry) {
        let key = self.next_front;
        self.next_front = self.next_front.saturating_sub(1);
        self.insert(key, entry);
    }

    /// Removes a request; true if it was pending.
    pub(crate) fn remove(&mut self, digest: &RequestDigest) -> bool {
        let Some(key) = self.keys.remove(digest) else {
            return false;
        };
        if let Some(entry) = self.order.remove(&key) {
            self.left(&entry);
        }
        true
    }

    /// Accounts for `entry` leaving.
    fn left(&mut self, entry: &Entry) {
        self.bytes = self.bytes.saturating_sub(entry.request.len() as u64);
        if let Some(p) = entry.forwarder
            && let Some(n) = self.forwarded.get_mut(&p)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.forwarded.remove(&p);
            }
        }
    }

    /// The oldest pending request.
    pub(crate) fn oldest(&self) -> Option<&Entry> {
        self.order.values().next()
    }

    /// Pending requests from insertion key `from` on, oldest first, with their keys.
    pub(crate) fn starting_at(&self, from: u64) -> impl Iterator<Item = (u64, &Entry)> {
        self.order.range(from..).map(|(k, e)| (*k, e))
    }

    /// Removes and returns the oldest requests, at most `max_count` of them and at most
    /// `max_bytes` in total (at least one if any is pending and fits alone).
    pub(crate) fn take_front(&mut self, max_count: usize, max_bytes: u64) -> Vec<Entry> {
        let mut taken = Vec::new();
        let mut bytes = 0u64;
        while taken.len() < max_count {
            let Some((&key, entry)) = self.order.iter().next() else {
                break;
            };
            let total = bytes.saturating_add(entry.request.len() as u64);
            if total > max_bytes {
                break;
            }
            bytes = total;
            if let Some(entry) = self.order.remove(&key) {
                self.keys.remove(&entry.digest);
                self.left(&entry);
                taken.push(entry);
            }
        }
        taken
    }
}

/// The digests of the last `capacity` ordered requests, oldest forgotten first.
#[derive(Debug)]
pub(crate) struct OrderedMemory {
    capacity: usize,
    fifo: VecDeque<RequestDigest>,
    set: HashSet<RequestDigest, arma::DigestHash>,
}

impl OrderedMemory {
    pub(crate) fn new(capacity: usize) -> OrderedMemory {
        OrderedMemory {
            capacity,
            fifo: VecDeque::new(),
            set: HashSet::default(),
        }
    }

    pub(crate) fn contains(&self, digest: &RequestDigest) -> bool {
        self.set.contains(digest)
    }

    pub(crate) fn insert(&mut self, digest: RequestDigest) {
        if !self.set.insert(digest) {
            return;
        }
        self.fifo.push_back(digest);
        while self.fifo.len() > self.capacity {
            if let Some(old) = self.fifo.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.fifo.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(byte: u8, len: usize) -> Entry {
        let request: Request = vec![byte; len].into();
        Entry {
            digest: RequestDigest::of(&request),
            request,
            arrival_ms: 0,
            forwarder: None,
        }
    }

    #[test]
    fn fifo_with_front_insertions_and_byte_accounting() {
        let mut m = Mempool::new();
        m.push_back(entry(1, 10));
        m.push_back(entry(2, 20));
        m.push_front(entry(3, 5));
        assert_eq!((m.len(), m.bytes()), (3, 35));
        let order: Vec<u8> = m.starting_at(0).map(|(_, e)| e.request[0]).collect();
        assert_eq!(order, vec![3, 1, 2]);
        assert!(m.remove(&entry(1, 10).digest));
        assert!(!m.remove(&entry(1, 10).digest));
        assert_eq!((m.len(), m.bytes()), (2, 25));
        // 5 + 20 > 24: only the first fits.
        let taken = m.take_front(10, 24);
        assert_eq!(taken.iter().map(|e| e.request[0]).collect::<Vec<_>>(), vec![3]);
        assert_eq!((m.len(), m.bytes()), (1, 20));
        assert!(!m.contains(&entry(3, 5).digest));
        assert_eq!(m.take_front(0, 100).len(), 0);
        assert_eq!(m.take_front(1, 100).len(), 1);
        assert_eq!((m.len(), m.bytes()), (0, 0));
    }

    #[test]
    fn ordered_memory_forgets_the_oldest() {
        let mut o = OrderedMemory::new(2);
        let d = |b: u8| RequestDigest::of(&[b]);
        o.insert(d(1));
        o.insert(d(2));
        o.insert(d(2));
        assert_eq!(o.len(), 2);
        o.insert(d(3));
        assert!(!o.contains(&d(1)));
        assert!(o.contains(&d(2)) && o.contains(&d(3)));
        assert_eq!(o.len(), 2);
    }
}
