//! The batches a node serves from memory: every batch its core emitted `Serve` for, kept
//! until it is ordered, its term is over, or the bound pushes it out (a `Fetch` then
//! reads it from the store). `Pull` streams wait on a version counter for new ones, and
//! skip seqs that left the set because they were ordered ([`Served::next_for_pull`]).
//! The last [`RECENT`] ordered batches stay in memory for `Fetch` and the decision
//! follower: the assemblers ask for a batch right when it is ordered, and reading each
//! back from the store was a visible part of a batcher's CPU.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use types::digest::Digest32;
use types::{BatchId, PartyId};

use crate::SignedBatch;

type Key = (u64, PartyId, u64);

/// Ordered batches kept in memory for `Fetch`, the newest.
pub const RECENT: usize = 16;

/// A batch's request digests packed for its compact form (docs/batcher.md "Compact
/// pulls").
pub type Packed = Arc<Vec<u8>>;

/// Served batches by (term, primary, seq), at most `capacity` of them.
pub struct Served {
    batches: Mutex<BTreeMap<Key, Arc<SignedBatch>>>,
    /// The packed request digests of the served batches that have a compact form.
    packed: Mutex<BTreeMap<Key, (Digest32, Packed)>>,
    /// The last [`RECENT`] batches that left `batches` because they were ordered.
    recent: Mutex<std::collections::VecDeque<Arc<SignedBatch>>>,
    /// Per (term, primary): the highest seq removed because it was ordered.
    ordered: Mutex<BTreeMap<(u64, PartyId), u64>>,
    capacity: usize,
    version: watch::Sender<u64>,
}

fn key(b: &SignedBatch) -> Key {
    (b.header.term, b.id().primary, b.id().seq)
}

impl Served {
    /// An empty set holding at most `capacity` batches.
    pub fn new(capacity: std::num::NonZeroUsize) -> Served {
        Served {
            batches: Mutex::new(BTreeMap::new()),
            packed: Mutex::new(BTreeMap::new()),
            recent: Mutex::new(std::collections::VecDeque::with_capacity(RECENT)),
            ordered: Mutex::new(BTreeMap::new()),
            capacity: capacity.get(),
            version: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Arc<SignedBatch>>> {
        self.batches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves `batch` (the oldest term and seq leaves at the bound) and wakes pullers.
    pub fn insert(&self, batch: Arc<SignedBatch>) {
        self.insert_with_digests(batch, None);
    }

    /// Serves `batch`, with its compact form when `packed` holds its request digests.
    pub fn insert_with_digests(&self, batch: Arc<SignedBatch>, packed: Option<Packed>) {
        {
            let mut map = self.lock();
            let mut compact = self.packed_lock();
            let k = key(&batch);
            match packed {
                Some(p) => compact.insert(k, (batch.header.digest, p)),
                None => compact.remove(&k),
            };
            map.insert(k, batch);
            while map.len() > self.capacity {
                if let Some((gone, _)) = map.pop_first() {
                    compact.remove(&gone);
                }
            }
        }
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn packed_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, (Digest32, Packed)>> {
        self.packed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The packed request digests of the served `batch`, if it has a compact form.
    pub fn packed_digests(&self, batch: &SignedBatch) -> Option<Packed> {
        self.packed_lock()
            .get(&key(batch))
            .filter(|(digest, _)| *digest == batch.header.digest)
            .map(|(_, p)| Arc::clone(p))
    }

    /// What a `Pull` from `seq` of `primary`'s lane in `term` reads next: the batch at
    /// `seq`; or, when `seq` was ordered (and so left the set), the next one served — a
    /// puller that asks for an ordered seq (an assembler after a restart) goes on instead
    /// of waiting for it for ever. A seq not served and not known ordered (not cut yet,
    /// or pushed out by the bound) is waited for, as before.
    pub fn next_for_pull(&self, term: u64, primary: PartyId, seq: u64) -> Option<Arc<SignedBatch>> {
        let map = self.lock();
        if let Some(b) = map.get(&(term, primary, seq)) {
            return Some(Arc::clone(b));
        }
        let mark = self
            .ordered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(term, primary))
            .copied();
        if mark.is_none_or(|m| seq > m) {
            return None;
        }
        map.range((term, primary, seq)..=(term, primary, u64::MAX))
            .next()
            .map(|(_, b)| Arc::clone(b))
    }

    /// The batch `id` with `digest`, whatever its term: served, or ordered recently.
    pub fn by_digest(&self, id: BatchId, digest: &Digest32) -> Option<Arc<SignedBatch>> {
        let is = |b: &&Arc<SignedBatch>| b.id() == id && b.header.digest == *digest;
        if let Some(b) = self.lock().values().find(is) {
            return Some(Arc::clone(b));
        }
        self.recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .rev()
            .find(is)
            .cloned()
    }

    /// Forgets the batch `id` with `digest` (it was ordered), and remembers that its
    /// seq was ordered in its term.
    pub fn remove(&self, id: BatchId, digest: &Digest32) {
        let mut ordered_in = Vec::new();
        let mut left = Vec::new();
        self.lock().retain(|_, b| {
            let gone = b.id() == id && b.header.digest == *digest;
            if gone {
                ordered_in.push(b.header.term);
                left.push(Arc::clone(b));
            }
            !gone
        });
        {
            let mut compact = self.packed_lock();
            for b in &left {
                compact.remove(&key(b));
            }
        }
        if !left.is_empty() {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            for b in left {
                if recent.len() >= RECENT {
                    recent.pop_front();
                }
                recent.push_back(b);
            }
        }
        let mut marks = self.ordered.lock().unwrap_or_else(PoisonError::into_inner);
        for term in ordered_in {
            let mark = marks.entry((term, id.primary)).or_insert(id.seq);
            *mark = (*mark).max(id.seq);
        }
    }

    /// Forgets the batches (and ordered marks) of terms before `term`.
    pub fn forget_before(&self, term: u64) {
        self.lock().retain(|(t, _, _), _| *t >= term);
        self.packed_lock().retain(|(t, _, _), _| *t >= term);
        self.ordered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(t, _), _| *t >= term);
    }

    /// Batches served now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is served.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A receiver that changes whenever a batch is served.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(term: u64, primary: PartyId, seq: u64) -> Arc<SignedBatch> {
        let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, &format!("served/{primary}"));
        let requests: Vec<arma::Request> = vec![Arc::from(&seq.to_be_bytes()[..])];
        Arc::new(SignedBatch::sign(
            BatchId::new(0, primary, seq),
            term,
            requests,
            &key,
        ))
    }

    /// A puller asking for seq 2 after seqs 1–3 were served and 1–2 ordered (removed):
    /// before, it waited at seq 2 for ever; now it gets seq 3. A seq not known ordered is
    /// still waited for (a lagging secondary is not sent later seqs it would refuse), and
    /// other lanes and terms are not mixed in.
    #[test]
    fn a_pull_from_an_ordered_seq_goes_on_with_the_next_served() {
        let s = Served::new(std::num::NonZeroUsize::new(16).unwrap());
        for seq in 1..=3 {
            s.insert(batch(5, 2, seq));
        }
        s.insert(batch(5, 3, 9));
        s.insert(batch(6, 2, 7));
        assert!(s.next_for_pull(5, 3, 8).is_none(), "not ordered: wait for seq 8");
        for seq in 1..=2 {
            let b = batch(5, 2, seq);
            s.remove(b.id(), &b.header.digest);
        }
        assert_eq!(s.next_for_pull(5, 2, 2).unwrap().id().seq, 3);
        assert_eq!(s.next_for_pull(5, 2, 1).unwrap().id().seq, 3);
        assert_eq!(s.next_for_pull(5, 2, 3).unwrap().id().seq, 3);
        assert!(s.next_for_pull(5, 2, 4).is_none(), "nothing served after: wait");
        assert!(s.next_for_pull(4, 2, 1).is_none(), "another term");
        assert!(s.next_for_pull(6, 2, 0).is_none(), "term 6 has nothing ordered");
        s.forget_before(6);
        assert!(s.next_for_pull(5, 2, 2).is_none());
    }

    /// An ordered batch leaves the served set (pullers skip it) but stays fetchable by
    /// digest among the last `RECENT` ordered ones; older ones are dropped.
    #[test]
    fn ordered_batches_stay_fetchable_among_the_recent_ones() {
        let s = Served::new(std::num::NonZeroUsize::new(64).unwrap());
        let all: Vec<_> = (1..=RECENT as u64 + 2).map(|seq| batch(1, 2, seq)).collect();
        for b in &all {
            s.insert(Arc::clone(b));
        }
        for b in &all {
            s.remove(b.id(), &b.header.digest);
        }
        assert!(s.is_empty());
        let first = &all[0];
        assert!(
            s.by_digest(first.id(), &first.header.digest).is_none(),
            "pushed out"
        );
        let last = &all[all.len() - 1];
        let got = s.by_digest(last.id(), &last.header.digest).unwrap();
        assert!(Arc::ptr_eq(&got, last));
        assert!(
            s.by_digest(last.id(), &first.header.digest).is_none(),
            "another digest"
        );
    }
}
