//! The secondary's side: pulling and verifying the primary's batches, forwarding ignored
//! requests and complaining about a censoring or lying primary (Arma §4.3).

use std::collections::HashSet;
use std::sync::Arc;

use types::BatchId;
use types::digest::batch_digest;

use crate::core::{Batcher, Output};
use crate::messages::{ComplaintReason, RequestDigest, SignedBatch};
use crate::{Config, Error, Result};

impl Batcher {
    /// A batch served by `from`: accepted if it is the current primary's next batch and it
    /// verifies; a bogus one is rejected with a complaint.
    pub(crate) fn on_batch(&mut self, from: types::PartyId, batch: SignedBatch) {
        if !self.takes_next(from, &batch.header) {
            return;
        }
        let digests = match verify_batch_digests(&self.cfg, &batch) {
            Ok(digests) => digests,
            Err(error) => {
                self.reject(from, error);
                return;
            }
        };
        // A request this secondary knows as ordered, or holds in another batch of the
        // term: a correct primary batches a request once, so the batch is bogus (it would
        // be ordered twice).
        let id = batch.id();
        let repeated = digests.iter().position(|d| self.not_new(d, id));
        if let Some(index) = repeated {
            self.reject(from, Error::RequestNotNew { id, index });
            return;
        }
        self.next_seq = batch.id().seq.checked_add(1);
        self.add_in_flight(Arc::new(batch), digests);
    }

    /// A compact batch served by `from` (docs/batcher.md "Compact pulls"): when it is the
    /// batch this secondary asked for, it is rebuilt from the pending requests and
    /// accepted as a pulled batch would be. What the digests alone show wrong (count,
    /// a repeated request, one ordered or in another batch) and a bad signature reject it
    /// as for a full batch; what depends on the bytes (a digest not pending here, a
    /// request pending here with other bytes than the primary's, so that the sizes or the
    /// batch digest differ) asks for the full batch instead: the same content may come
    /// with another client signature, and that is not the primary's fault.
    pub(crate) fn on_compact_batch(&mut self, from: types::PartyId, batch: crate::CompactBatch) {
        if !self.takes_next(from, &batch.header) {
            return;
        }
        let id = batch.id();
        if let Err(error) = check_count(&self.cfg, id, batch.digests.len(), batch.header.tx_count) {
            self.reject(from, error);
            return;
        }
        let mut seen = HashSet::with_capacity(batch.digests.len());
        let mut requests = Vec::with_capacity(batch.digests.len());
        let mut missing = false;
        for (index, d) in batch.digests.iter().enumerate() {
            if !seen.insert(*d) {
                self.reject(from, Error::DuplicateRequestInBatch { id, index });
                return;
            }
            if self.not_new(d, id) {
                self.reject(from, Error::RequestNotNew { id, index });
                return;
            }
            match self.mempool.get(d) {
                Some(r) => requests.push(Arc::clone(r)),
                None => missing = true,
            }
        }
        let signed = self.cfg.keys.get(&id.primary).is_some_and(|key| {
            crypto::verify_batch_attestation(key, &batch.header.signed_bytes(), &batch.signature).is_ok()
        });
        if !signed {
            self.reject(from, Error::BadBatchSignature { id });
            return;
        }
        let bytes = requests
            .iter()
            .try_fold(0u64, |acc, r| acc.checked_add(r.len() as u64))
            .unwrap_or(u64::MAX);
        if missing || bytes > self.cfg.max_batch_bytes.get() || batch_digest(&requests) != batch.header.digest
        {
            self.out.push(Output::NeedFullBatch {
                from,
                id,
                digest: batch.header.digest,
            });
            return;
        }
        let crate::CompactBatch {
            header,
            digests,
            signature,
        } = batch;
        self.next_seq = id.seq.checked_add(1);
        let full = SignedBatch {
            header,
            requests,
            signature,
        };
        self.add_in_flight(Arc::new(full), digests);
    }

    /// A batch served by `from` with a request the shell refused: when it is the batch
    /// this secondary asked the primary for, it is bogus (rejected with a complaint);
    /// otherwise it is ignored like any batch it did not ask for.
    pub(crate) fn on_refused_batch(
        &mut self,
        from: types::PartyId,
        batch: &SignedBatch,
        index: usize,
        reason: String,
    ) {
        if self.is_primary() || from != self.primary {
            return;
        }
        if let Err(error) = check_origin(&self.cfg, from, batch) {
            self.reject(from, error);
            return;
        }
        if self.next_seq != Some(batch.id().seq) || batch.header.term != self.term {
            return;
        }
        let id = batch.id();
        self.reject(from, Error::RefusedRequest { id, index, reason });
    }

    /// Whether a pulled batch (full or compact) of `header` served by `from` is the one
    /// this secondary waits for: from the current primary, naming this shard and that
    /// primary (else rejected with a complaint), the next seq of the term, under the
    /// unordered bound (else ignored: stale, early, a repeat or of another term).
    fn takes_next(&mut self, from: types::PartyId, header: &crate::BatchHeader) -> bool {
        if self.is_primary() || from != self.primary {
            return false;
        }
        if let Err(error) = check_origin_id(&self.cfg, from, header.id) {
            self.reject(from, error);
            return false;
        }
        let at_bound = self.in_flight.len() >= self.cfg.max_unordered_batches.get() as usize;
        self.next_seq == Some(header.id.seq) && header.term == self.term && !at_bound
    }

    /// A request of batch `id` this secondary knows as ordered, or holds in another batch
    /// of the term: a correct primary batches a request once, so such a batch is bogus.
    fn not_new(&self, d: &RequestDigest, id: BatchId) -> bool {
        self.ordered.contains(d) || self.in_flight_digests.get(d).is_some_and(|other| *other != id)
    }

    fn reject(&mut self, from: types::PartyId, error: Error) {
        self.out.push(Output::BatchRejected { from, error });
        self.complain(ComplaintReason::BogusBatch);
    }

    /// Asks the shell to pull the next batch of the term, once per batch.
    pub(crate) fn request_pull(&mut self) {
        let Some(seq) = self.next_seq else {
            return;
        };
        if self.in_flight.len() >= self.cfg.max_unordered_batches.get() as usize {
            return;
        }
        let want = BatchId::new(self.cfg.shard, self.primary, seq);
        if self.pull != Some(want) {
            self.pull = Some(want);
            self.out.push(Output::Pull(want));
        }
    }

    /// Forwards requests pending `forward_timeout_ms` in the term (once per round of
    /// `forward_timeout_ms`) and complains once per term when one is pending
    /// `complain_timeout_ms` (SmartBFT-style).
    pub(crate) fn watch_censorship(&mut self) {
        if self.now.saturating_sub(self.forward_round_ms) >= self.cfg.forward_timeout_ms {
            self.forward_round_ms = self.now;
            self.forward_cursor = 0;
        }
        let started = self.term_started_ms;
        let waited = |arrival: u64, now: u64| now.saturating_sub(arrival.max(started));
        let mut cursor = self.forward_cursor;
        let mut forwards = Vec::new();
        for (key, entry) in self.mempool.starting_at(self.forward_cursor) {
            if waited(entry.arrival_ms, self.now) < self.cfg.forward_timeout_ms {
                break;
            }
            forwards.push(Output::ForwardToPrimary {
                to: self.primary,
                request: Arc::clone(&entry.request),
            });
            cursor = key.saturating_add(1);
        }
        self.forward_cursor = cursor;
        self.out.extend(forwards);
        let overdue = self
            .mempool
            .oldest()
            .is_some_and(|e| waited(e.arrival_ms, self.now) >= self.cfg.complain_timeout_ms);
        if overdue {
            self.complain(ComplaintReason::Censorship);
        }
    }
}

/// The batch claims this shard and the primary that served it.
fn check_origin(cfg: &Config, from: types::PartyId, batch: &SignedBatch) -> Result<()> {
    check_origin_id(cfg, from, batch.id())
}

fn check_origin_id(cfg: &Config, from: types::PartyId, id: BatchId) -> Result<()> {
    if id.shard != cfg.shard {
        return Err(Error::BatchOfAnotherShard {
            id,
            expected: cfg.shard,
        });
    }
    if id.primary != from {
        return Err(Error::NotFromItsPrimary { id, from });
    }
    Ok(())
}

/// Checks a batch as a secondary must before persisting it: limits, tx count, digest,
/// every request's size, shard and uniqueness, and the primary's signature.
pub fn verify_batch(cfg: &Config, batch: &SignedBatch) -> Result<()> {
    verify_batch_digests(cfg, batch).map(|_| ())
}

/// [`verify_batch`], returning the [`RequestDigest`]s of the batch's requests in order
/// (computed for the uniqueness check, kept so they are not computed again).
fn verify_batch_digests(cfg: &Config, batch: &SignedBatch) -> Result<Vec<RequestDigest>> {
    let id = batch.id();
    let count = batch.requests.len();
    if id.shard != cfg.shard {
        return Err(Error::BatchOfAnotherShard {
            id,
            expected: cfg.shard,
        });
    }
    check_count(cfg, id, count, batch.header.tx_count)?;
    let bytes = batch
        .requests
        .iter()
        .try_fold(0u64, |acc, r| acc.checked_add(r.len() as u64))
        .unwrap_or(u64::MAX);
    if bytes > cfg.max_batch_bytes.get() {
        return Err(Error::BatchTooLarge {
            id,
            bytes,
            max: cfg.max_batch_bytes.get(),
        });
    }
    let digests = verify_requests(cfg, batch)?;
    if batch_digest(&batch.requests) != batch.header.digest {
        return Err(Error::DigestMismatch { id });
    }
    let signed = cfg
        .keys
        .get(&id.primary)
        .is_some_and(|key| batch.signature_verifies(key));
    if !signed {
        return Err(Error::BadBatchSignature { id });
    }
    Ok(digests)
}

/// A batch of `count` requests claiming `tx_count`: not empty, within the limit, and the
/// count it claims.
fn check_count(cfg: &Config, id: BatchId, count: usize, tx_count: u32) -> Result<()> {
    if count == 0 {
        return Err(Error::EmptyBatch { id });
    }
    let max = cfg.max_batch_requests.get();
    if count > max as usize {
        return Err(Error::TooManyRequests { id, count, max });
    }
    if usize::try_from(tx_count).ok() != Some(count) {
        return Err(Error::TxCountMismatch {
            id,
            claimed: tx_count,
            count,
        });
    }
    Ok(())
}

fn verify_requests(cfg: &Config, batch: &SignedBatch) -> Result<Vec<RequestDigest>> {
    let id = batch.id();
    let max = cfg.max_request_bytes.get();
    let mut seen = HashSet::with_capacity(batch.requests.len());
    let mut digests = Vec::with_capacity(batch.requests.len());
    for (index, request) in batch.requests.iter().enumerate() {
        if request.len() > max {
            return Err(Error::RequestTooLarge {
                id,
                index,
                bytes: request.len(),
                max,
            });
        }
        let (digest, shard) = arma::content::keys(request, cfg.shards);
        let shard = shard.unwrap_or(u32::MAX);
        if shard != cfg.shard {
            return Err(Error::RequestOfAnotherShard { id, index, shard });
        }
        if !seen.insert(digest) {
            return Err(Error::DuplicateRequestInBatch { id, index });
        }
        digests.push(digest);
    }
    Ok(digests)
}
