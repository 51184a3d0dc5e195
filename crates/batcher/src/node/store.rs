//! The batcher's durable state, two journals under the data directory:
//!
//! * `batches/` (segments `*.batch`): one record per batch this batcher persisted (cut
//!   as primary, accepted as secondary), an encoded `wire::pb::Batch`, appended and
//!   fsynced before the core hears `Persisted` (persist before attest).
//! * `progress/` (segments `*.progress`): one record per decision the node finished
//!   feeding to its core: `u8 version = 1 ‖ u64 next_decision ‖ u64 term ‖
//!   u64 last_ordered_seq` (big-endian). The last record is where a restart resumes.
//!
//! One persister thread owns both writers (blocking I/O stays off the async workers);
//! a failed append or sync ends the thread with [`Done::Failed`] and the node stops.

use std::collections::HashMap;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::Path;
use std::sync::{Arc, Mutex};

use journal::{Durability, Journal, JournalReader, Position};
use prost::Message as _;
use tokio::sync::mpsc;
use types::BatchId;
use types::digest::Digest32;
use wire::pb;

use crate::{Error, Result, SignedBatch};

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

    const LEN: usize = 25;

    fn encode(&self) -> [u8; Progress::LEN] {
        let mut out = [0u8; Progress::LEN];
        out[0] = 1;
        out[1..9].copy_from_slice(&self.next_decision.to_be_bytes());
        out[9..17].copy_from_slice(&self.term.to_be_bytes());
        out[17..25].copy_from_slice(&self.last_ordered_seq.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Progress> {
        let u64_at = |at: usize| -> Option<u64> {
            let b: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
            Some(u64::from_be_bytes(b))
        };
        if bytes.len() != Progress::LEN || bytes.first() != Some(&1) {
            return None;
        }
        Some(Progress {
            next_decision: u64_at(1)?,
            term: u64_at(9)?,
            last_ordered_seq: u64_at(17)?,
        })
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
}

/// The open journals (owned by the persister thread once it runs).
pub struct Store {
    batches: Journal,
    progress: Journal,
    index: Arc<Mutex<StoreIndex>>,
    appended_progress: u64,
}

fn storage(what: &'static str, e: &dyn std::fmt::Display) -> Error {
    Error::Storage {
        what,
        reason: e.to_string(),
    }
}

fn decode_batch(bytes: &[u8]) -> Result<SignedBatch> {
    let pb = pb::Batch::decode(bytes).map_err(|e| storage("decode a stored batch", &e))?;
    SignedBatch::try_from(pb)
}

fn journal_config(extension: &'static str, durability: Durability, max_record: u32) -> journal::Config {
    journal::Config {
        segment_bytes: NonZeroU64::new(64 << 20).unwrap_or(NonZeroU64::MIN),
        max_record_bytes: NonZeroU32::new(max_record).unwrap_or(NonZeroU32::MIN),
        durability,
        first_seq: 0,
        extension,
    }
}

impl Store {
    /// Opens (or creates) the journals under `dir`, repairs a torn tail, indexes the
    /// batches and reads the last progress record. Blocking.
    pub fn open(dir: &Path, durability: Durability, max_batch_record: u32) -> Result<(Store, Recovered)> {
        let batches = Journal::open(
            dir.join("batches"),
            journal_config("batch", durability, max_batch_record),
        )
        .map_err(|e| storage("open the batch store", &e))?;
        let progress_cfg = journal_config("progress", durability, 64);
        let progress_log = Journal::open(dir.join("progress"), progress_cfg)
            .map_err(|e| storage("open the progress log", &e))?;
        let mut progress = Progress::GENESIS;
        for record in progress_log.reader().replay(progress_log.first_seq()) {
            let record = record.map_err(|e| storage("replay the progress log", &e))?;
            progress = Progress::decode(&record.payload).ok_or_else(|| Error::Storage {
                what: "decode the progress log",
                reason: format!("record {} is not a progress record", record.seq),
            })?;
        }
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
        let stored = index.by_key.len();
        let store = Store {
            batches,
            progress: progress_log,
            index: Arc::new(Mutex::new(index)),
            appended_progress: 0,
        };
        Ok((
            store,
            Recovered {
                progress,
                unordered,
                stored,
            },
        ))
    }

    /// A reader sharing the index.
    pub fn reader(&self) -> StoreReader {
        StoreReader {
            reader: self.batches.reader(),
            index: Arc::clone(&self.index),
        }
    }

    fn append_batch(&mut self, batch: &SignedBatch) -> Result<()> {
        let bytes = pb::Batch::from(batch).encode_to_vec();
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

    fn append_progress(&mut self, progress: &Progress) -> Result<()> {
        let appended = self
            .progress
            .append(&progress.encode())
            .map_err(|e| storage("append progress", &e))?;
        self.progress
            .sync()
            .map_err(|e| storage("sync the progress log", &e))?;
        self.appended_progress = self.appended_progress.saturating_add(1);
        if self.appended_progress.is_multiple_of(4096) {
            // Only the last record matters: drop the segments before it.
            self.progress
                .truncate_front(appended.seq)
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
    /// Append and fsync a progress record.
    Progress(Progress),
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
                    Job::Progress(p) => store.append_progress(&p).map(|()| None),
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
        assert_eq!(Progress::decode(&p.encode()), Some(p));
        let mut bad = p.encode();
        bad[0] = 2;
        assert_eq!(Progress::decode(&bad), None);
        assert_eq!(Progress::decode(&p.encode()[..24]), None);
    }
}
