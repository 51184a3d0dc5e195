//! The primary's side: cutting batches within the window, and counting acks.

use std::sync::Arc;

use types::BatchId;

use crate::core::Batcher;
use crate::messages::{Baf, SignedBatch};

impl Batcher {
    /// Cuts batches while one is due and the window and the unordered bound allow it.
    pub(crate) fn cut_batches(&mut self) {
        while self.may_cut() && self.batch_due() {
            let Some(seq) = self.next_seq else {
                return;
            };
            let max_count = self.cfg.max_batch_requests.get() as usize;
            let taken = self.mempool.take_front(max_count, self.cfg.max_batch_bytes.get());
            if taken.is_empty() {
                return;
            }
            let (requests, digests) = taken.into_iter().map(|e| (e.request, e.digest)).unzip();
            let id = BatchId::new(self.cfg.shard, self.cfg.party, seq);
            let batch = Arc::new(SignedBatch::sign(id, self.term, requests, &self.key));
            self.next_seq = seq.checked_add(1);
            self.add_in_flight(batch, digests);
        }
    }

    /// Room in the window (unconfirmed batches) and under the unordered bound.
    pub(crate) fn may_cut(&self) -> bool {
        self.unconfirmed_batches() < self.cfg.window.get() as usize
            && self.in_flight.len() < self.cfg.max_unordered_batches.get() as usize
    }

    /// A full batch is pending, or the oldest request waited `batch_timeout_ms`.
    fn batch_due(&self) -> bool {
        let Some(oldest) = self.mempool.oldest() else {
            return false;
        };
        self.mempool.len() >= self.cfg.max_batch_requests.get() as usize
            || self.mempool.bytes() >= self.cfg.max_batch_bytes.get()
            || self.now.saturating_sub(oldest.arrival_ms) >= self.cfg.batch_timeout_ms
    }

    /// An ack from a secondary: a BAF for one of this primary's unordered batches, under
    /// the config in force (the consenters refuse a BAF of another config, so it would
    /// not make the batch ordered).
    pub(crate) fn on_baf(&mut self, baf: Baf) {
        if !self.is_primary() || baf.signer == self.cfg.party || baf.config != self.config_seq {
            return;
        }
        let Some(key) = self.cfg.keys.get(&baf.signer) else {
            return;
        };
        let Some(b) = self.in_flight.get(&baf.header.id) else {
            return;
        };
        if b.batch.header != baf.header || b.acks.contains(&baf.signer) || !baf.verifies(key) {
            return;
        }
        if let Some(b) = self.in_flight.get_mut(&baf.header.id) {
            b.acks.insert(baf.signer);
        }
    }
}
