//! The assembler's pure core: verified decisions in, blocks out, in block order.
//!
//! * [`Core::on_decision`] queues the headers of a decision whose certificate the shell
//!   verified (`arma::verify_pb_decision`); each must continue the chain (number and
//!   previous hash) after the last appended or queued block, and headers already in
//!   the ledger (a restart re-reads the decision of the last block) are skipped.
//! * [`Core::offer`] gives it a batch (prefetched from the party's batchers, or fetched
//!   for the next block): kept only if its requests have the digest it claims, in an
//!   index bounded in bytes per lane (shard, primary).
//! * [`Core::take_blocks`] pops every queued header at the front whose batch is held:
//!   header, requests and the decision's proof make the block.
//! * [`Core::wanted`] names the front header's batch when it is missing, for the shell
//!   to fetch from any batcher of the shard.
//!
//! No I/O, no clock; the shell persists blocks before it serves them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use arma::{DecisionProof, OrderedHeader, Request, TermChange};
use types::digest::{Digest32, batch_digest};
use types::{PartyId, ShardId};

/// A block: an ordered header, its batch's requests and the proof of the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// The header.
    pub header: OrderedHeader,
    /// The batch's requests, in order (their `batch_digest` is the header's digest).
    pub requests: Vec<Request>,
    /// The decision that ordered it (shared by the headers of that decision).
    pub proof: Arc<DecisionProof>,
}

/// A batch offered to the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfferedBatch {
    /// Its shard.
    pub shard: ShardId,
    /// The primary that cut it.
    pub primary: PartyId,
    /// The primary's seq.
    pub seq: u64,
    /// The digest its sender claims.
    pub digest: Digest32,
    /// Its requests.
    pub requests: Vec<Request>,
}

impl OfferedBatch {
    fn bytes(&self) -> usize {
        self.requests.iter().map(|r| r.len() + 16).sum::<usize>() + 64
    }
}

/// What the shell should fetch: the next block's batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The block that waits for it.
    pub block: u64,
    /// Its shard.
    pub shard: ShardId,
    /// Its primary.
    pub primary: PartyId,
    /// Its seq.
    pub seq: u64,
    /// Its digest.
    pub digest: Digest32,
}

/// Why the core refused a decision or a batch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// A verified decision's header does not continue the chain: the consenters'
    /// chain and this ledger disagree (never expected; the shell stops).
    #[error("decision {decision}: header {number} does not continue the chain after block {after}: {reason}")]
    Chain {
        /// The decision.
        decision: u64,
        /// The header's number.
        number: u64,
        /// The last block appended or queued.
        after: u64,
        /// What differs.
        reason: &'static str,
    },
    /// The batch's requests do not have the digest it claims.
    #[error("batch ({shard}, {primary}, {seq}): its requests do not have the claimed digest")]
    Digest {
        /// Shard.
        shard: ShardId,
        /// Primary.
        primary: PartyId,
        /// Seq.
        seq: u64,
    },
}

/// Bounds of the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of prefetched batches kept per lane (shard, primary).
    pub lane_bytes: usize,
    /// Headers queued before the shell stops reading decisions.
    pub max_queued: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            lane_bytes: 32 << 20,
            max_queued: 4096,
        }
    }
}

/// Prefetched batches of one (shard, primary), by (seq, digest).
#[derive(Debug, Default)]
struct Lane {
    batches: BTreeMap<(u64, Digest32), OfferedBatch>,
    bytes: usize,
}

/// The assembler's state.
#[derive(Debug)]
pub struct Core {
    limits: Limits,
    /// The next block to append.
    next_block: u64,
    /// Number and hash of the last block appended or queued (`None` before block 0).
    tail: Option<(u64, Digest32)>,
    queue: VecDeque<(OrderedHeader, Arc<DecisionProof>)>,
    lanes: BTreeMap<(ShardId, PartyId), Lane>,
}

impl Core {
    /// A core whose ledger holds blocks below `next_block`, the last one with header
    /// hash `last_hash` (`None` for an empty ledger).
    pub fn new(limits: Limits, next_block: u64, last_hash: Option<Digest32>) -> Core {
        let tail = next_block.checked_sub(1).and_then(|n| last_hash.map(|h| (n, h)));
        Core {
            limits,
            next_block,
            tail,
            queue: VecDeque::new(),
            lanes: BTreeMap::new(),
        }
    }

    /// The next block to append.
    pub fn next_block(&self) -> u64 {
        self.next_block
    }

    /// Headers waiting for their batch.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Whether the shell may hand over another decision.
    pub fn has_room(&self) -> bool {
        self.queue.len() < self.limits.max_queued
    }

    /// Bytes of prefetched batches held.
    pub fn index_bytes(&self) -> usize {
        self.lanes.values().map(|l| l.bytes).sum()
    }

    /// Queues the headers of a verified decision (see the module docs) and forgets the
    /// prefetched batches of shards whose term changed (their primary's unordered
    /// batches will never be ordered).
    pub fn on_decision(
        &mut self,
        proof: Arc<DecisionProof>,
        headers: &[OrderedHeader],
        terms: &[TermChange],
    ) -> Result<(), CoreError> {
        for h in headers {
            match self.tail {
                Some((n, _)) if h.number <= n => continue, // already appended or queued
                None if h.number < self.next_block => continue,
                _ => {}
            }
            let (expected, previous) = match self.tail {
                Some((n, hash)) => (n.saturating_add(1), hash),
                None => (self.next_block, [0; 32]),
            };
            let fail = |reason| CoreError::Chain {
                decision: proof.decision,
                number: h.number,
                after: expected.saturating_sub(1),
                reason,
            };
            if h.number != expected {
                return Err(fail("a gap in the block numbers"));
            }
            if h.previous_hash != previous {
                return Err(fail("its previous hash is not the last block's hash"));
            }
            self.tail = Some((h.number, h.hash()));
            self.queue.push_back((*h, Arc::clone(&proof)));
        }
        for t in terms {
            self.lanes.retain(|(shard, _), _| *shard != t.shard);
        }
        Ok(())
    }

    /// Offers a batch. One whose requests do not have its digest is refused; one that a
    /// queued header needs is kept; otherwise it is kept while its lane has room (a
    /// lower seq evicts the highest ones, a higher seq than all held is dropped).
    pub fn offer(&mut self, batch: OfferedBatch) -> Result<(), CoreError> {
        if batch_digest(&batch.requests) != batch.digest {
            return Err(CoreError::Digest {
                shard: batch.shard,
                primary: batch.primary,
                seq: batch.seq,
            });
        }
        let needed = self.queue.iter().any(|(h, _)| {
            (h.shard, h.primary, h.seq, h.digest) == (batch.shard, batch.primary, batch.seq, batch.digest)
        });
        let size = batch.bytes();
        let cap = self.limits.lane_bytes;
        let lane = self.lanes.entry((batch.shard, batch.primary)).or_default();
        let key = (batch.seq, batch.digest);
        if lane.batches.contains_key(&key) {
            return Ok(());
        }
        if !needed {
            while lane.bytes.saturating_add(size) > cap {
                let Some((&top, _)) = lane.batches.last_key_value() else {
                    break;
                };
                if top <= key {
                    return Ok(()); // nothing lower to make room for: drop the newcomer
                }
                if let Some(evicted) = lane.batches.remove(&top) {
                    lane.bytes = lane.bytes.saturating_sub(evicted.bytes());
                }
            }
            if lane.bytes.saturating_add(size) > cap {
                return Ok(());
            }
        }
        lane.bytes = lane.bytes.saturating_add(size);
        lane.batches.insert(key, batch);
        Ok(())
    }

    /// The batch the front header waits for, if it is not held.
    pub fn wanted(&self) -> Option<Wanted> {
        let (h, _) = self.queue.front()?;
        let held = self
            .lanes
            .get(&(h.shard, h.primary))
            .is_some_and(|l| l.batches.contains_key(&(h.seq, h.digest)));
        (!held).then_some(Wanted {
            block: h.number,
            shard: h.shard,
            primary: h.primary,
            seq: h.seq,
            digest: h.digest,
        })
    }

    /// Pops the blocks that are complete, in order. The shell appends them (durably)
    /// before it serves them.
    pub fn take_blocks(&mut self) -> Vec<Block> {
        let mut out = Vec::new();
        while let Some((h, _)) = self.queue.front() {
            let lane_key = (h.shard, h.primary);
            let Some(lane) = self.lanes.get_mut(&lane_key) else {
                break;
            };
            let Some(batch) = lane.batches.remove(&(h.seq, h.digest)) else {
                break;
            };
            lane.bytes = lane.bytes.saturating_sub(batch.bytes());
            // Batches of this lane at or below the ordered seq are never needed again.
            let stale: Vec<(u64, Digest32)> = lane
                .batches
                .range(..=(h.seq, [0xff; 32]))
                .map(|(k, _)| *k)
                .collect();
            for k in stale {
                if let Some(b) = lane.batches.remove(&k) {
                    lane.bytes = lane.bytes.saturating_sub(b.bytes());
                }
            }
            let Some((header, proof)) = self.queue.pop_front() else {
                break;
            };
            self.next_block = header.number.saturating_add(1);
            out.push(Block {
                header,
                requests: batch.requests,
                proof,
            });
        }
        out
    }
}
