//! The batches a node serves from memory: every batch its core emitted `Serve` for, kept
//! until it is ordered, its term is over, or the bound pushes it out (a `Fetch` then
//! reads it from the store). `Pull` streams wait on a version counter for new ones, and
//! skip seqs that left the set ([`Served::at_or_after`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use types::digest::Digest32;
use types::{BatchId, PartyId};

use crate::SignedBatch;

type Key = (u64, PartyId, u64);

/// Served batches by (term, primary, seq), at most `capacity` of them.
pub struct Served {
    batches: Mutex<BTreeMap<Key, Arc<SignedBatch>>>,
    capacity: usize,
    version: watch::Sender<u64>,
}

fn key(b: &SignedBatch) -> Key {
    (b.header.term, b.id().primary, b.id().seq)
}

impl Served {
    /// An empty set holding at most `capacity` batches.
    pub fn new(capacity: usize) -> Served {
        Served {
            batches: Mutex::new(BTreeMap::new()),
            capacity: capacity.max(1),
            version: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Arc<SignedBatch>>> {
        self.batches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves `batch` (the oldest term and seq leaves at the bound) and wakes pullers.
    pub fn insert(&self, batch: Arc<SignedBatch>) {
        {
            let mut map = self.lock();
            map.insert(key(&batch), batch);
            while map.len() > self.capacity {
                map.pop_first();
            }
        }
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The served batch of `primary` in `term` with the lowest seq at or above `seq`. A
    /// `Pull` from a seq that was ordered (and so left the served set) goes on with the
    /// next one served instead of waiting for it for ever: a primary cuts, and a
    /// secondary accepts, seqs in order, so a lower seq missing here is one that was
    /// ordered or pushed out by the bound, never one still to come.
    pub fn at_or_after(&self, term: u64, primary: PartyId, seq: u64) -> Option<Arc<SignedBatch>> {
        self.lock()
            .range((term, primary, seq)..=(term, primary, u64::MAX))
            .next()
            .map(|(_, b)| Arc::clone(b))
    }

    /// The batch `id` with `digest`, whatever its term.
    pub fn by_digest(&self, id: BatchId, digest: &Digest32) -> Option<Arc<SignedBatch>> {
        self.lock()
            .values()
            .find(|b| b.id() == id && b.header.digest == *digest)
            .cloned()
    }

    /// Forgets the batch `id` with `digest` (it was ordered).
    pub fn remove(&self, id: BatchId, digest: &Digest32) {
        self.lock()
            .retain(|_, b| !(b.id() == id && b.header.digest == *digest));
    }

    /// Forgets the batches of terms before `term`.
    pub fn forget_before(&self, term: u64) {
        self.lock().retain(|(t, _, _), _| *t >= term);
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
    /// before, it waited at seq 2 for ever; now it gets seq 3. Other lanes and terms are
    /// not mixed in.
    #[test]
    fn a_pull_from_an_ordered_seq_goes_on_with_the_next_served() {
        let s = Served::new(16);
        for seq in 1..=3 {
            s.insert(batch(5, 2, seq));
        }
        s.insert(batch(5, 3, 9));
        s.insert(batch(6, 2, 7));
        for seq in 1..=2 {
            let b = batch(5, 2, seq);
            s.remove(b.id(), &b.header.digest);
        }
        let next = s.at_or_after(5, 2, 2).unwrap();
        assert_eq!(next.id().seq, 3);
        assert_eq!(s.at_or_after(5, 2, 3).unwrap().id().seq, 3);
        assert!(s.at_or_after(5, 2, 4).is_none(), "nothing served after: wait");
        assert!(s.at_or_after(4, 2, 1).is_none(), "another term");
        assert_eq!(s.at_or_after(6, 2, 0).unwrap().header.term, 6);
    }
}
