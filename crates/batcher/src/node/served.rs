//! The batches a node serves from memory: every batch its core emitted `Serve` for, kept
//! until it is ordered, its term is over, or the bound pushes it out (a `Fetch` then
//! reads it from the store). `Pull` streams wait on a version counter for new ones.

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

    /// The batch of `primary` in `term` at `seq`.
    pub fn by_seq(&self, term: u64, primary: PartyId, seq: u64) -> Option<Arc<SignedBatch>> {
        self.lock().get(&(term, primary, seq)).cloned()
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
