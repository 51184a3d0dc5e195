//! The decisions log of the test application: one record per decided sequence in a
//! [`journal`] directory (segments `*.decisions`; the record's sequence number is the
//! decision's), whose payload is the JSON object
//! `{"seq":…,"view":…,"digest":"<hex>","requests":["<hex>",…]}`, appended in order.
//! It is the application's durable state: on restart its last sequence number is
//! `Application::applied()`, and the engine re-delivers from its WAL whatever the log
//! lost. Records are written without fsync — a lost tail is re-delivered from the WAL,
//! which is synced — and the journal's torn-tail rule applies on open: a torn tail is
//! cut off, a bad record before it (or a gap) is [`Error::CorruptLog`]. The old JSON
//! lines file is not read (nothing was deployed).

use std::num::{NonZeroU32, NonZeroU64};
use std::path::{Path, PathBuf};

use bft::{Decision, Seq};
use journal::{Durability, Journal, JournalReader};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One line of the decisions log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionLine {
    /// Sequence number (1, 2, …).
    pub seq: Seq,
    /// View of the commit certificate this replica holds. Informative only: a
    /// proposal carried into a new view may be decided in different views at
    /// different replicas; the digest is the same.
    pub view: u64,
    /// Hex of the proposal digest (`bft::Proposal::digest`).
    pub digest: String,
    /// The ordered requests, hex encoded (they are opaque bytes).
    pub requests: Vec<String>,
}

impl DecisionLine {
    /// The line for `d`.
    pub fn of(d: &Decision) -> DecisionLine {
        DecisionLine {
            seq: d.seq(),
            view: d.certificate.view,
            digest: hex::encode(d.certificate.digest.0),
            requests: d.proposal.requests.iter().map(hex::encode).collect(),
        }
    }
}

/// The journal configuration of a decisions log.
fn journal_config() -> journal::Config {
    journal::Config {
        segment_bytes: NonZeroU64::new(64 << 20).unwrap_or(NonZeroU64::MIN),
        max_record_bytes: NonZeroU32::new(1 << 30).unwrap_or(NonZeroU32::MIN),
        durability: Durability::Manual,
        first_seq: 1,
        extension: "decisions",
    }
}

/// The node's error for a journal error of the log at `path` (also the Arma log's).
pub(crate) fn log_error(path: &Path, e: journal::Error) -> Error {
    match e {
        journal::Error::Corrupt { seq, .. } => Error::CorruptLog {
            path: path.display().to_string(),
            after_seq: seq.saturating_sub(1),
        },
        journal::Error::Io { path, source } => Error::Io {
            path: path.display().to_string(),
            source,
        },
        other => Error::Log {
            path: path.display().to_string(),
            source: other,
        },
    }
}

/// The line of a record, if it is the line of decision `seq`.
fn parse(payload: &[u8], seq: Seq) -> Option<DecisionLine> {
    serde_json::from_slice::<DecisionLine>(payload)
        .ok()
        .filter(|l| l.seq == seq)
}

/// Appends decision lines to the log.
pub struct DecisionLog {
    journal: Journal,
    path: PathBuf,
    last: Seq,
}

impl DecisionLog {
    /// Opens (or creates) the log directory, cuts a torn tail, and returns it with the
    /// highest sequence number it holds. A gap or a bad record before the tail is
    /// corruption.
    pub fn open(path: &Path) -> Result<DecisionLog> {
        let journal = Journal::open(path, journal_config()).map_err(|e| log_error(path, e))?;
        let mut last = 0;
        for record in journal.reader().replay(journal.first_seq()) {
            let record = record.map_err(|e| log_error(path, e))?;
            if record.seq != last + 1 || parse(&record.payload, record.seq).is_none() {
                return Err(Error::CorruptLog {
                    path: path.display().to_string(),
                    after_seq: last,
                });
            }
            last = record.seq;
        }
        Ok(DecisionLog {
            journal,
            path: path.to_path_buf(),
            last,
        })
    }

    /// Highest sequence number in the log.
    pub fn last(&self) -> Seq {
        self.last
    }

    /// Appends `d`, which must be the next sequence number; decisions at or below the
    /// last one (re-deliveries) are skipped.
    pub fn append(&mut self, d: &Decision) -> Result<()> {
        if d.seq() <= self.last {
            return Ok(());
        }
        if d.seq() != self.last + 1 {
            return Err(Error::CorruptLog {
                path: self.path.display().to_string(),
                after_seq: self.last,
            });
        }
        let line = serde_json::to_vec(&DecisionLine::of(d)).map_err(|e| Error::Io {
            path: self.path.display().to_string(),
            source: std::io::Error::other(e),
        })?;
        self.journal.append(&line).map_err(|e| log_error(&self.path, e))?;
        self.last = d.seq();
        Ok(())
    }

    /// Kept for callers that batch: every append is already handed to the OS (the log
    /// is not fsynced on every append; the WAL is).
    pub fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    /// Makes every appended decision durable.
    pub fn sync(&mut self) -> Result<()> {
        self.journal.sync().map_err(|e| log_error(&self.path, e))
    }
}

/// Reads a decisions log (for tests and tools), also while a node is writing it: the
/// lines of the whole records present now, up to the first that does not parse.
pub fn read_log(path: &Path) -> Result<Vec<DecisionLine>> {
    let reader = JournalReader::open_read_only(path, &journal_config()).map_err(|e| log_error(path, e))?;
    let mut lines = Vec::new();
    for record in reader.replay(reader.first_seq()) {
        let record = record.map_err(|e| log_error(path, e))?;
        match parse(&record.payload, record.seq) {
            Some(line) => lines.push(line),
            None => break,
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::sync::Arc;

    fn decision(seq: Seq) -> Decision {
        let p = bft::Proposal {
            instance: bft::InstanceId(0),
            seq,
            requests: vec![vec![seq as u8, 1]],
            metadata: vec![],
        };
        Decision {
            certificate: bft::Certificate {
                phase: bft::Phase::Commit,
                instance: p.instance,
                view: 0,
                seq,
                digest: p.digest(),
                signatures: vec![],
            },
            proposal: Arc::new(p),
        }
    }

    #[test]
    fn reopen_cuts_a_torn_line_and_rejects_gaps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("decisions");
        let mut log = DecisionLog::open(&path).expect("open");
        for s in 1..=3 {
            log.append(&decision(s)).expect("append");
        }
        log.append(&decision(2)).expect("a re-delivery is skipped");
        assert!(log.append(&decision(5)).is_err(), "gap");
        log.flush().expect("flush");
        drop(log);
        let segment = path.join(format!("{:020}.decisions", 1));
        // A crash in the middle of appending decision 4 leaves a prefix of its record.
        let good = std::fs::metadata(&segment).expect("meta").len();
        let mut raw = Journal::open(&path, journal_config()).expect("journal");
        let line = serde_json::to_vec(&DecisionLine::of(&decision(4))).expect("json");
        raw.append(&line).expect("append");
        drop(raw);
        let f = OpenOptions::new().write(true).open(&segment).expect("open");
        f.set_len(good + 20).expect("torn write");
        drop(f);
        let log = DecisionLog::open(&path).expect("reopen");
        assert_eq!(log.last(), 3);
        assert_eq!(std::fs::metadata(&segment).expect("meta").len(), good);
        let lines = read_log(&path).expect("read");
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2], DecisionLine::of(&decision(3)));
        drop(log);
        // corruption in the middle fails loudly
        let bytes = std::fs::read(&segment).expect("read");
        let at = bytes
            .windows(7)
            .position(|w| w == b"\"seq\":2")
            .expect("record 2");
        let mut bad = bytes.clone();
        bad[at + 6] = b'7';
        std::fs::write(&segment, &bad).expect("write");
        assert!(matches!(
            DecisionLog::open(&path),
            Err(Error::CorruptLog { after_seq: 1, .. })
        ));
        assert_eq!(std::fs::read(&segment).expect("read"), bad, "nothing cut");
        // a whole record that is not the next decision is corruption too
        std::fs::write(&segment, &bytes).expect("write");
        let mut raw = Journal::open(&path, journal_config()).expect("journal");
        let line = serde_json::to_vec(&DecisionLine::of(&decision(9))).expect("json");
        raw.append(&line).expect("append");
        drop(raw);
        assert!(matches!(
            DecisionLog::open(&path),
            Err(Error::CorruptLog { after_seq: 3, .. })
        ));
    }

    #[test]
    fn read_log_reads_while_the_node_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("decisions");
        assert!(read_log(&path).is_err(), "no log yet");
        let mut log = DecisionLog::open(&path).expect("open");
        for s in 1..=2 {
            log.append(&decision(s)).expect("append");
        }
        let lines = read_log(&path).expect("read while open");
        assert_eq!(
            lines,
            vec![DecisionLine::of(&decision(1)), DecisionLine::of(&decision(2))]
        );
        log.append(&decision(3)).expect("append");
        assert_eq!(read_log(&path).expect("read").len(), 3);
    }
}
