//! The Arma decisions log and state snapshot of a consenter node (docs/consenter.md
//! "What is persisted").
//!
//! * The log is a [`journal`] directory (segments `*.arma`); record `s` is decision `s`
//!   as served, the protobuf `fabrx.v1.Decision` (headers, term changes, view, requests
//!   root, metadata and the commit certificate's signatures). Appends reach the OS at
//!   once and are synced before every snapshot; a lost tail is re-derived from the
//!   engine's WAL on restart (same decision, same certificate, same bytes).
//! * The snapshot is the [`ArmaState`] after some decision `s ≤` the log's last,
//!   written to a temporary file, synced and renamed over the previous one. On restart
//!   the application starts from it and the engine re-applies the WAL's decisions above
//!   `s`; each re-derived decision the log already holds must match it
//!   ([`Error::Diverged`] otherwise).
//!
//! Readers ([`ArmaLogReader`]) find records through an in-memory index of positions
//! (24 bytes per decision held) and learn of appends through a watch channel.
//!
//! The log holds a window of decisions, not necessarily from 1: it is pruned to the
//! newest `retain` decisions (whole journal segments, [`ArmaLog::prune`]), and a
//! consenter that caught up by a state-transfer snapshot restarts it after the snapshot's
//! decision ([`ArmaLog::restart_at`]); earlier decisions are served by other consenters.

use std::collections::VecDeque;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use journal::{Durability, Journal, JournalReader, Position};
use prost::Message as _;
use tokio::sync::watch;
use wire::pb;

use crate::application::ArmaState;
use crate::{Error, Result};

/// Segment size of the log: pruning removes whole segments.
const SEGMENT_BYTES: u64 = 64 << 20;

/// The journal configuration of an Arma decisions log.
fn journal_config(segment_bytes: u64) -> journal::Config {
    journal::Config {
        segment_bytes: NonZeroU64::new(segment_bytes).unwrap_or(NonZeroU64::MIN),
        max_record_bytes: NonZeroU32::new(256 << 20).unwrap_or(NonZeroU32::MIN),
        durability: Durability::Manual,
        first_seq: 1,
        extension: "arma",
    }
}

use crate::decisions::log_error;

/// Positions of the records held: decision `first + i` at `positions[i]`.
#[derive(Debug, Default)]
struct Held {
    first: u64,
    positions: VecDeque<Position>,
}

type Index = Arc<RwLock<Held>>;

/// The writer of the log (one per node, on the decisions writer thread).
pub struct ArmaLog {
    journal: Journal,
    path: PathBuf,
    index: Index,
    tx_last: watch::Sender<u64>,
}

impl ArmaLog {
    /// Opens (or creates) the log, cuts a torn tail and indexes it. A gap, a record that
    /// does not decode or whose number is not its sequence is corruption.
    pub fn open(path: &Path) -> Result<ArmaLog> {
        Self::open_sized(path, SEGMENT_BYTES)
    }

    /// [`ArmaLog::open`] with segments of `segment_bytes` (tests prune small logs).
    pub(crate) fn open_sized(path: &Path, segment_bytes: u64) -> Result<ArmaLog> {
        let journal = Journal::open(path, journal_config(segment_bytes)).map_err(|e| log_error(path, e))?;
        let first = journal.first_seq();
        let mut index = VecDeque::new();
        let mut last = first.saturating_sub(1);
        for record in journal.reader().replay(first) {
            let record = record.map_err(|e| log_error(path, e))?;
            let number = pb::Decision::decode(record.payload.as_slice()).map(|d| d.number);
            if record.seq != last.saturating_add(1) || number.ok() != Some(record.seq) {
                return Err(Error::CorruptLog {
                    path: path.display().to_string(),
                    after_seq: last,
                });
            }
            index.push_back(record.position);
            last = record.seq;
        }
        let (tx_last, _) = watch::channel(last);
        Ok(ArmaLog {
            journal,
            path: path.to_path_buf(),
            index: Arc::new(RwLock::new(Held {
                first,
                positions: index,
            })),
            tx_last,
        })
    }

    /// The first decision the log holds (`last + 1` when it holds none).
    pub fn first(&self) -> u64 {
        self.index.read().unwrap_or_else(|e| e.into_inner()).first
    }

    /// Drops the oldest decisions while more than `retain` are held (whole segments
    /// only, so a little more may stay); returns the first decision held after it.
    pub fn prune(&mut self, retain: std::num::NonZeroU64) -> Result<u64> {
        let last = self.last();
        let keep_from = last.saturating_add(1).saturating_sub(retain.get());
        if keep_from <= self.first() {
            return Ok(self.first());
        }
        self.journal
            .truncate_front(keep_from)
            .map_err(|e| log_error(&self.path, e))?;
        let first = self.journal.first_seq();
        let mut held = self.index.write().unwrap_or_else(|e| e.into_inner());
        while held.first < first && held.positions.pop_front().is_some() {
            held.first += 1;
        }
        Ok(held.first)
    }

    /// Drops every decision and continues after `last` (a state-transfer snapshot at
    /// decision `last` replaced the decisions this consenter did not see).
    pub fn restart_at(&mut self, last: u64) -> Result<()> {
        let next = last.saturating_add(1);
        self.journal
            .restart_at(next)
            .map_err(|e| log_error(&self.path, e))?;
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = Held {
            first: next,
            positions: VecDeque::new(),
        };
        self.tx_last.send_replace(last);
        Ok(())
    }

    /// The last decision in the log (0: none).
    pub fn last(&self) -> u64 {
        *self.tx_last.borrow()
    }

    /// Appends decision `d`, which must be the next one.
    pub fn append(&mut self, d: &pb::Decision) -> Result<()> {
        let last = self.last();
        if Some(d.number) != last.checked_add(1) {
            return Err(Error::Diverged {
                decision: d.number,
                reason: format!("appended after decision {last}"),
            });
        }
        let appended = self
            .journal
            .append(&d.encode_to_vec())
            .map_err(|e| log_error(&self.path, e))?;
        self.index
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .positions
            .push_back(appended.position);
        self.tx_last.send_replace(d.number);
        Ok(())
    }

    /// Makes every appended record durable.
    pub fn sync(&mut self) -> Result<()> {
        self.journal.sync().map_err(|e| log_error(&self.path, e))
    }

    /// A reader that sees every append once it returned.
    pub fn reader(&self) -> ArmaLogReader {
        ArmaLogReader {
            journal: self.journal.reader(),
            path: self.path.clone(),
            index: self.index.clone(),
            rx_last: self.tx_last.subscribe(),
        }
    }
}

/// Reads the log while the node writes it (the Decisions stream, restart checks).
#[derive(Clone)]
pub struct ArmaLogReader {
    journal: JournalReader,
    path: PathBuf,
    index: Index,
    rx_last: watch::Receiver<u64>,
}

impl ArmaLogReader {
    /// The last decision in the log.
    pub fn last(&self) -> u64 {
        *self.rx_last.borrow()
    }

    /// The first decision the log holds (`last + 1` when it holds none); earlier ones
    /// were pruned or skipped by state transfer.
    pub fn first(&self) -> u64 {
        self.index.read().unwrap_or_else(|e| e.into_inner()).first
    }

    /// Decision `number`, if the log holds it (blocking file read).
    pub fn read(&self, number: u64) -> Result<Option<pb::Decision>> {
        let position = {
            let held = self.index.read().unwrap_or_else(|e| e.into_inner());
            number
                .checked_sub(held.first)
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| held.positions.get(i).copied())
        };
        let Some(position) = position else {
            return Ok(None);
        };
        let bytes = self
            .journal
            .read(position)
            .map_err(|e| log_error(&self.path, e))?;
        let d = pb::Decision::decode(bytes.as_slice()).map_err(|_| Error::CorruptLog {
            path: self.path.display().to_string(),
            after_seq: number.saturating_sub(1),
        })?;
        Ok(Some(d))
    }

    /// A receiver of the last decision number, changed on every append; it errs once the
    /// writer is gone.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.rx_last.clone()
    }
}

/// Reads the state snapshot at `path` (a network of `shards` shards), if there is one.
pub fn load_snapshot(path: &Path, shards: u32) -> Result<Option<ArmaState>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(ArmaState::decode(&bytes, shards)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Io {
            path: path.display().to_string(),
            source: e,
        }),
    }
}

/// Writes the snapshot `bytes` to `path` atomically: a synced temporary file renamed
/// over it, then the directory synced.
pub fn write_snapshot(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let io = |source: std::io::Error| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(number: u64) -> pb::Decision {
        pb::Decision {
            number,
            view: 1,
            requests_root: vec![number as u8; 32],
            metadata: vec![1, 2, 3],
            ..pb::Decision::default()
        }
    }

    #[test]
    fn appends_read_back_by_number_and_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("arma");
        let mut log = ArmaLog::open(&path).expect("open");
        let reader = log.reader();
        assert_eq!(reader.read(1).expect("read"), None);
        for n in 1..=3 {
            log.append(&decision(n)).expect("append");
        }
        assert!(log.append(&decision(5)).is_err(), "gap");
        assert!(log.append(&decision(3)).is_err(), "repeat");
        assert_eq!(reader.last(), 3);
        assert_eq!(reader.read(2).expect("read"), Some(decision(2)));
        assert_eq!(reader.read(0).expect("read"), None);
        assert_eq!(reader.read(4).expect("read"), None);
        log.sync().expect("sync");
        drop(log);
        let log = ArmaLog::open(&path).expect("reopen");
        assert_eq!(log.last(), 3);
        assert_eq!(log.reader().read(3).expect("read"), Some(decision(3)));
    }

    #[test]
    fn prunes_whole_segments_and_restarts_after_a_snapshot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("arma");
        let mut log = ArmaLog::open_sized(&path, 256).expect("open");
        let reader = log.reader();
        for n in 1..=40 {
            log.append(&decision(n)).expect("append");
        }
        let first = log.prune(std::num::NonZeroU64::new(10).unwrap()).expect("prune");
        assert!(first > 1 && first <= 31, "first {first}");
        assert_eq!((reader.first(), reader.last()), (first, 40));
        assert_eq!(reader.read(first - 1).expect("read"), None, "pruned");
        assert_eq!(reader.read(35).expect("read"), Some(decision(35)));
        assert_eq!(
            log.prune(std::num::NonZeroU64::new(1000).unwrap())
                .expect("nothing to prune"),
            first
        );
        log.sync().expect("sync");
        drop(log);
        let mut log = ArmaLog::open_sized(&path, 256).expect("reopen");
        assert_eq!((log.first(), log.last()), (first, 40));
        // A state-transfer snapshot at decision 100: the log continues at 101.
        log.restart_at(100).expect("restart");
        let reader = log.reader();
        assert_eq!((reader.first(), reader.last()), (101, 100));
        assert_eq!(reader.read(40).expect("read"), None);
        assert!(log.append(&decision(100)).is_err(), "before the restart point");
        log.append(&decision(101)).expect("append");
        log.sync().expect("sync");
        drop(log);
        let log = ArmaLog::open_sized(&path, 256).expect("reopen");
        assert_eq!((log.first(), log.last()), (101, 101));
    }

    #[test]
    fn snapshot_is_replaced_atomically() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        assert_eq!(load_snapshot(&path, 2).expect("none"), None);
        let mut state = ArmaState::genesis(2);
        state.applied = 7;
        write_snapshot(&path, &state.encode()).expect("write");
        assert_eq!(load_snapshot(&path, 2).expect("load"), Some(state.clone()));
        assert!(load_snapshot(&path, 3).is_err(), "another network");
        state.applied = 9;
        write_snapshot(&path, &state.encode()).expect("rewrite");
        assert_eq!(load_snapshot(&path, 2).expect("load").map(|s| s.applied), Some(9));
        assert!(!path.with_extension("tmp").exists());
    }
}
