//! The batcher's durable state, two journals under the data directory:
//!
//! * `batches/` (segments `*.batch`): one record per batch this batcher persisted (cut
//!   as primary, accepted as secondary), an encoded `wire::pb::Batch`, appended and
//!   fsynced before the core hears `Persisted` (persist before attest).
//! * `progress/` (segments `*.progress`): one record per decision the node finished
//!   feeding to its core: `u8 version = 1 ‖ u64 next_decision ‖ u64 term ‖
//!   u64 last_ordered_seq ‖ u32 count ‖ count × digest[32]` (big-endian), the digests
//!   being those of the requests the decision ordered in this shard. The last record is
//!   where a restart resumes; the digests of the last `ordered_memory` ordered requests
//!   rebuild the core's memory of ordered requests (so a resubmission stays a
//!   duplicate across a restart). Segments older than those records are removed.
//!
//! One persister thread owns both writers (blocking I/O stays off the async workers);
//! a failed append or sync ends the thread with [`Done::Failed`] and the node stops.

use std::collections::{HashMap, VecDeque};
use std::num::{NonZeroU32, NonZeroU64};
use std::path::Path;
use std::sync::{Arc, Mutex};

use journal::{Durability, Journal, JournalReader, Position};
use prost::Message as _;
use tokio::sync::mpsc;
use types::BatchId;
use types::digest::Digest32;
use wire::pb;

use crate::{Error, RequestDigest, Result, SignedBatch};

/// Where the shard's ordering stood after the last decision the node finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The next decision to read from the consenter (1 is the first).
    pub next_decision: u64,
    /// The shard's term.
    pub term: u64,
    /// The seq of the shard's last ordered batch in that term (or the term's start).
    pub last_ordered_seq: u64,
}

impl Progress {
    /// Genesis: decision 1, term 0, nothing ordered.
    pub const GENESIS: Progress = Progress {
        next_decision: 1,
        term: 0,
        last_ordered_seq: 0,
    };

    const LEN: usize = 29;

    fn encode(&self, ordered: &[RequestDigest]) -> Vec<u8> {
        let count = ordered.len().min(MAX_DIGESTS);
        let skip = ordered.len().saturating_sub(count);
        let mut out = Vec::with_capacity(Progress::LEN.saturating_add(count.saturating_mul(32)));
        out.push(1);
        out.extend_from_slice(&self.next_decision.to_be_bytes());
        out.extend_from_slice(&self.term.to_be_bytes());
        out.extend_from_slice(&self.last_ordered_seq.to_be_bytes());
        out.extend_from_slice(&u32::try_from(count).unwrap_or(u32::MAX).to_be_bytes());
        for d in ordered.iter().skip(skip) {
            out.extend_from_slice(&d.0);
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<(Progress, Vec<RequestDigest>)> {
        let u64_at = |at: usize| -> Option<u64> {
            let b: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
            Some(u64::from_be_bytes(b))
        };
        if bytes.first() != Some(&1) {
            return None;
        }
        let count: [u8; 4] = bytes.get(25..29)?.try_into().ok()?;
        let count = usize::try_from(u32::from_be_bytes(count)).ok()?;
        let digests = bytes.get(Progress::LEN..)?;
        if digests.len() != count.checked_mul(32)? {
            return None;
        }
        let progress = Progress {
            next_decision: u64_at(1)?,
            term: u64_at(9)?,
            last_ordered_seq: u64_at(17)?,
        };
        let ordered = digests
            .chunks_exact(32)
            .filter_map(|c| <[u8; 32]>::try_from(c).ok().map(RequestDigest))
            .collect();
        Some((progress, ordered))
    }
}

/// Largest progress record.
const PROGRESS_MAX_RECORD: u32 = 64 << 20;
/// Most request digests one progress record keeps (the last ones of the decision).
const MAX_DIGESTS: usize = (PROGRESS_MAX_RECORD as usize - Progress::LEN) / 32;

/// The progress records that still hold digests of the last `ordered_memory` ordered
/// requests: `(record seq, digests in it)`, oldest first.
#[derive(Debug, Default)]
struct Recent {
    records: VecDeque<(u64, usize)>,
    digests: usize,
    memory: usize,
}

impl Recent {
    fn push(&mut self, seq: u64, count: usize) {
        if count == 0 {
            return;
        }
        self.records.push_back((seq, count));
        self.digests = self.digests.saturating_add(count);
        while let Some(&(_, first)) = self.records.front() {
            if self.digests.saturating_sub(first) < self.memory {
                break;
            }
            self.records.pop_front();
            self.digests = self.digests.saturating_sub(first);
        }
    }
}

/// Where each stored batch lives, by id and digest (a primary may reuse an id in a
/// later term; the digest tells the batches apart).
#[derive(Debug, Default)]
pub struct StoreIndex {
    by_key: HashMap<(BatchId, Digest32), Position>,
}

/// Read access to the batch store, shared by the services and the decision follower.
#[derive(Clone)]
pub struct StoreReader {
    reader: JournalReader,
    index: Arc<Mutex<StoreIndex>>,
}

impl StoreReader {
    /// The stored batch `id` with `digest`, if any (blocking file read).
    pub fn get(&self, id: BatchId, digest: &Digest32) -> Result<Option<SignedBatch>> {
        let position = {
            let index = self
                .index
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            index.by_key.get(&(id, *digest)).copied()
        };
        let Some(position) = position else {
            return Ok(None);
        };
        let bytes = self
            .reader
            .read(position)
            .map_err(|e| storage("read a batch", &e))?;
        decode_batch(&bytes).map(Some)
    }
}

/// What the store held when the node started.
pub struct Recovered {
    /// The last progress record (genesis when none).
    pub progress: Progress,
    /// The stored batches of `progress.term` with a seq above `last_ordered_seq`, in
    /// store order: candidates for `Batcher::restore`.
    pub unordered: Vec<Arc<SignedBatch>>,
    /// Batches in the store.
    pub stored: usize,
    /// The digests of the last `ordered_memory` requests ordered in the shard, oldest
    /// first.
    pub ordered: Vec<RequestDigest>,
}

/// Indexes every stored batch; returns the index and the batches of the progress's term
/// above its last ordered seq.
fn index_batches(batches: &Journal, progress: Progress) -> Result<(StoreIndex, Vec<Arc<SignedBatch>>)> {
    let mut index = StoreIndex::default();
    let mut unordered = Vec::new();
    for record in batches.reader().replay(batches.first_seq()) {
        let record = record.map_err(|e| storage("replay the batch store", &e))?;
        let batch = decode_batch(&record.payload)?;
        index
            .by_key
            .insert((batch.id(), batch.header.digest), record.position);
        if batch.header.term == progress.term && batch.id().seq > progress.last_ordered_seq {
            unordered.push(Arc::new(batch));
        }
    }
    Ok((index, unordered))
}

/// The open journals (owned by the persister thread once it runs).
pub struct Store {
    batches: Journal,
    progress: Journal,
    index: Arc<Mutex<StoreIndex>>,
    appended_progress: u64,
    recent: Recent,
    /// The term and last ordered seq of the last progress record made durable.
    synced: (u64, u64),
    /// Progress records appended since the last fsync of the progress log.
    unsynced: u32,
}

/// Progress records that only move `next_decision` on (the decision ordered nothing in
/// the shard and changed no term) appended at most this many in a row without an fsync.
/// Losing them in a crash only makes a restart read those decisions again, which change
/// nothing here; the bound keeps the resume point within a few seconds of decisions, far
/// inside what the consenters retain.
pub const MAX_UNSYNCED_PROGRESS: u32 = 64;

fn storage(what: &'static str, e: &dyn std::fmt::Display) -> Error {
    Error::Storage {
        what,
        reason: e.to_string(),
    }
}

fn decode_batch(bytes: &[u8]) -> Result<SignedBatch> {
    let pb = pb::Batch::decode(bytes).map_err(|e| storage("decode a stored batch", &e))?;
    Ok(SignedBatch::try_from(pb)?)
}

fn journal_config(
    extension: &'static str,
    durability: Durability,
    max_record: u32,
    segment: u64,
) -> journal::Config {
    journal::Config {
        segment_bytes: NonZeroU64::new(segment).unwrap_or(NonZeroU64::MIN),
        max_record_bytes: NonZeroU32::new(max_record).unwrap_or(NonZeroU32::MIN),
        durability,
        first_seq: 0,
        extension,
    }
}

impl Store {
    /// Opens (or creates) the journals under `dir`, repairs a torn tail, indexes the
    /// batches and reads the progress log. Blocking.
    pub fn open(
        dir: &Path,
        durability: Durability,
        max_batch_record: u32,
        ordered_memory: usize,
    ) -> Result<(Store, Recovered)> {
        let batches_cfg = journal_config("batch", durability, max_batch_record, 64 << 20);
        let batches = Journal::open(dir.join("batches"), batches_cfg)
            .map_err(|e| storage("open the batch store", &e))?;
        let progress_cfg = journal_config("progress", durability, PROGRESS_MAX_RECORD, 8 << 20);
        let progress_log = Journal::open(dir.join("progress"), progress_cfg)
            .map_err(|e| storage("open the progress log", &e))?;
        let mut progress = Progress::GENESIS;
        let mut ordered = VecDeque::new();
        let mut recent = Recent {
            memory: ordered_memory,
            ..Recent::default()
        };
        for record in progress_log.reader().replay(progress_log.first_seq()) {
            let record = record.map_err(|e| storage("replay the progress log", &e))?;
            let (p, digests) = Progress::decode(&record.payload).ok_or_else(|| Error::Storage {
                what: "decode the progress log",
                reason: format!("record {} is not a progress record", record.seq),
            })?;
            progress = p;
            recent.push(record.seq, digests.len());
            ordered.extend(digests);
            while ordered.len() > ordered_memory {
                ordered.pop_front();
            }
        }
        let (index, unordered) = index_batches(&batches, progress)?;
        let stored = index.by_key.len();
        let store = Store {
            batches,
            progress: progress_log,
            index: Arc::new(Mutex::new(index)),
            appended_progress: 0,
            recent,
            synced: (progress.term, progress.last_ordered_seq),
            unsynced: 0,
        };
        let recovered = Recovered {
            progress,
            unordered,
            stored,
            ordered: ordered.into(),
        };
        Ok((store, recovered))
    }

    /// A reader sharing the index.
    pub fn reader(&self) -> StoreReader {
        StoreReader {
            reader: self.batches.reader(),
            index: Arc::clone(&self.index),
        }
    }

    fn append_batch(&mut self, batch: &SignedBatch) -> Result<()> {
        // The bytes of `pb::Batch::from(batch)`, without a copy of each request on the way.
        let bytes = arma::encode_batch(batch);
        let appended = self
            .batches
            .append(&bytes)
            .map_err(|e| storage("append a batch", &e))?;
        self.batches
            .sync()
            .map_err(|e| storage("sync the batch store", &e))?;
        let mut index = self
            .index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        index
            .by_key
            .insert((batch.id(), batch.header.digest), appended.position);
        Ok(())
    }

    /// Appends a progress record; fsyncs it unless it only moves `next_decision` on (see
    /// [`MAX_UNSYNCED_PROGRESS`]). A record with ordered digests or another term or last
    /// ordered seq is durable on return, and with it every record before it (one file).
    fn append_progress(&mut self, progress: &Progress, ordered: &[RequestDigest]) -> Result<()> {
        let appended = self
            .progress
            .append(&progress.encode(ordered))
            .map_err(|e| storage("append progress", &e))?;
        let moved = (progress.term, progress.last_ordered_seq) != self.synced;
        if moved || !ordered.is_empty() || self.unsynced >= MAX_UNSYNCED_PROGRESS {
            self.progress
                .sync()
                .map_err(|e| storage("sync the progress log", &e))?;
            self.synced = (progress.term, progress.last_ordered_seq);
            self.unsynced = 0;
        } else {
            self.unsynced = self.unsynced.saturating_add(1);
        }
        self.recent.push(appended.seq, ordered.len().min(MAX_DIGESTS));
        self.appended_progress = self.appended_progress.saturating_add(1);
        if self.appended_progress.is_multiple_of(1024) {
            // Keep the last record and those holding the remembered digests.
            let keep = self.recent.records.front().map_or(appended.seq, |(seq, _)| *seq);
            self.progress
                .truncate_front(keep.min(appended.seq))
                .map_err(|e| storage("truncate the progress log", &e))?;
        }
        Ok(())
    }
}

/// Work for the persister thread.
#[derive(Debug)]
pub enum Job {
    /// Append and fsync a batch, then answer [`Done::Persisted`].
    Batch(Arc<SignedBatch>),
    /// Append a progress record with the digests of the requests the decision ordered in
    /// this shard (fsynced as `Store::append_progress` says).
    Progress(Progress, Vec<RequestDigest>),
}

/// What the persister thread reports.
#[derive(Debug)]
pub enum Done {
    /// The batch is durable.
    Persisted {
        /// Its id.
        id: BatchId,
        /// Its digest.
        digest: Digest32,
    },
    /// An append or sync failed; the thread ended.
    Failed(Error),
}

/// Runs the persister on its own thread until `rx` closes or an append fails.
pub fn spawn_persister(
    mut store: Store,
    mut rx: mpsc::Receiver<Job>,
    tx: mpsc::Sender<Done>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("batcher-persist".into())
        .spawn(move || {
            while let Some(job) = rx.blocking_recv() {
                let result = match job {
                    Job::Batch(batch) => store.append_batch(&batch).map(|()| {
                        Some(Done::Persisted {
                            id: batch.id(),
                            digest: batch.header.digest,
                        })
                    }),
                    Job::Progress(p, ordered) => store.append_progress(&p, &ordered).map(|()| None),
                };
                match result {
                    Ok(Some(done)) => {
                        if tx.blocking_send(done).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let _ = tx.blocking_send(Done::Failed(e));
                        return;
                    }
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_records_round_trip_and_reject_other_bytes() {
        let p = Progress {
            next_decision: 7,
            term: 3,
            last_ordered_seq: u64::MAX,
        };
        let ordered = vec![RequestDigest([1; 32]), RequestDigest([2; 32])];
        assert_eq!(Progress::decode(&p.encode(&ordered)), Some((p, ordered.clone())));
        assert_eq!(Progress::decode(&p.encode(&[])), Some((p, vec![])));
        let mut bad = p.encode(&ordered);
        bad[0] = 2;
        assert_eq!(Progress::decode(&bad), None);
        let whole = p.encode(&ordered);
        assert_eq!(Progress::decode(&whole[..whole.len() - 1]), None);
        assert_eq!(Progress::decode(&whole[..24]), None);
    }

    #[test]
    fn recent_records_cover_the_remembered_digests() {
        let mut r = Recent {
            memory: 5,
            ..Recent::default()
        };
        r.push(1, 3);
        r.push(2, 0);
        r.push(3, 3);
        assert_eq!(r.records, VecDeque::from([(1, 3), (3, 3)]));
        r.push(4, 2);
        // Records 3 and 4 hold 5 digests: record 1 is no longer needed.
        assert_eq!(r.records, VecDeque::from([(3, 3), (4, 2)]));
        r.push(5, 9);
        assert_eq!(r.records, VecDeque::from([(5, 9)]));
    }

    #[test]
    fn only_records_that_move_nothing_wait_for_a_later_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = Store::open(dir.path(), Durability::Manual, 1 << 20, 8).unwrap();
        let at = |next_decision, term, last_ordered_seq| Progress {
            next_decision,
            term,
            last_ordered_seq,
        };
        let d = RequestDigest([7; 32]);
        // (record, its ordered digests, unsynced records after it)
        let table: Vec<(Progress, Vec<RequestDigest>, u32)> = vec![
            (at(2, 0, 0), vec![], 1),
            (at(3, 0, 0), vec![], 2),
            (at(4, 0, 1), vec![d], 0),
            (at(5, 0, 1), vec![], 1),
            (at(6, 1, 0), vec![], 0),
            (at(7, 1, 0), vec![], 1),
        ];
        for (progress, ordered, unsynced) in table {
            store.append_progress(&progress, &ordered).unwrap();
            assert_eq!(store.unsynced, unsynced, "after {progress:?}");
        }
        for i in 0..2 * u64::from(MAX_UNSYNCED_PROGRESS) {
            store.append_progress(&at(8 + i, 1, 0), &[]).unwrap();
            assert!(store.unsynced <= MAX_UNSYNCED_PROGRESS);
        }
        drop(store);
        let (_, rec) = Store::open(dir.path(), Durability::Manual, 1 << 20, 8).unwrap();
        assert_eq!(rec.progress, at(7 + 2 * u64::from(MAX_UNSYNCED_PROGRESS), 1, 0));
        assert_eq!(rec.ordered, vec![d]);
    }

    #[test]
    fn a_store_reopens_with_its_progress_batches_and_ordered_digests() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, rec) = Store::open(dir.path(), Durability::NoSync, 1 << 20, 3).unwrap();
        assert_eq!(
            (rec.progress, rec.stored, rec.ordered.len()),
            (Progress::GENESIS, 0, 0)
        );
        let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, "store-test");
        let batch = |seq, term| {
            SignedBatch::sign(
                BatchId::new(0, 1, seq),
                term,
                vec![Arc::from(vec![seq as u8; 8])],
                &key,
            )
        };
        for (seq, term) in [(1, 0), (2, 0), (3, 1), (4, 1)] {
            store.append_batch(&batch(seq, term)).unwrap();
        }
        let d = |b: u8| RequestDigest([b; 32]);
        let p = Progress {
            next_decision: 9,
            term: 1,
            last_ordered_seq: 3,
        };
        store.append_progress(&Progress::GENESIS, &[d(1), d(2)]).unwrap();
        store.append_progress(&p, &[d(3), d(4)]).unwrap();
        let b3 = batch(3, 1);
        assert_eq!(store.reader().get(b3.id(), &b3.header.digest).unwrap(), Some(b3));
        drop(store);
        let (_, rec) = Store::open(dir.path(), Durability::NoSync, 1 << 20, 3).unwrap();
        assert_eq!(rec.progress, p);
        assert_eq!(rec.stored, 4);
        assert_eq!(rec.ordered, vec![d(2), d(3), d(4)]);
        let seqs: Vec<u64> = rec.unordered.iter().map(|b| b.id().seq).collect();
        assert_eq!(seqs, vec![4]);
    }

    #[tokio::test]
    async fn a_failed_append_is_reported_and_ends_the_persister() {
        let dir = tempfile::tempdir().unwrap();
        // A batch record bound smaller than the batch: the append fails.
        let (store, _) = Store::open(dir.path(), Durability::NoSync, 64, 3).unwrap();
        let (tx_job, rx_job) = mpsc::channel(4);
        let (tx_done, mut rx_done) = mpsc::channel(4);
        let thread = spawn_persister(store, rx_job, tx_done).unwrap();
        let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, "store-test");
        let batch = SignedBatch::sign(BatchId::new(0, 1, 1), 0, vec![Arc::from(vec![1u8; 100])], &key);
        tx_job.send(Job::Batch(Arc::new(batch))).await.unwrap();
        match rx_done.recv().await {
            Some(Done::Failed(Error::Storage { what, .. })) => assert_eq!(what, "append a batch"),
            other => panic!("expected a storage failure, got {other:?}"),
        }
        // The thread ended: nothing else is reported, later jobs find no one.
        assert!(rx_done.recv().await.is_none());
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .unwrap()
            .unwrap();
        assert!(
            tx_job
                .send(Job::Progress(Progress::GENESIS, vec![]))
                .await
                .is_err()
        );
    }
}
