//! The decisions log of the test application: one JSON line per decided sequence,
//! `{"seq":…,"view":…,"digest":"<hex>","requests":["<hex>",…]}`, appended in order.
//! It is the application's durable state: on restart its last sequence number is
//! `Application::applied()`, and the engine re-delivers from its WAL whatever the log
//! lost. Lines are written without fsync — a lost tail is re-delivered from the WAL,
//! which is synced — and a torn last line is cut off when the log is opened.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use bft::{Decision, Seq};
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

/// Appends decision lines to the log file.
pub struct DecisionLog {
    out: BufWriter<File>,
    path: PathBuf,
    last: Seq,
}

impl DecisionLog {
    /// Opens (or creates) the log, cuts a torn last line, and returns it with the
    /// highest sequence number it holds. A gap or a bad line before the last one is
    /// corruption.
    pub fn open(path: &Path) -> Result<DecisionLog> {
        let io = |e: std::io::Error| Error::Io {
            path: path.display().to_string(),
            source: e,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io)?;
        let mut text = Vec::new();
        file.read_to_end(&mut text).map_err(io)?;
        let mut last = 0;
        let mut valid = 0;
        for line in text.split_inclusive(|b| *b == b'\n') {
            let parsed = line
                .ends_with(b"\n")
                .then(|| serde_json::from_slice::<DecisionLine>(line).ok())
                .flatten();
            match parsed {
                Some(l) if l.seq == last + 1 => {
                    last = l.seq;
                    valid += line.len();
                }
                _ if valid + line.len() == text.len() => break, // torn last line
                _ => {
                    return Err(Error::CorruptLog {
                        path: path.display().to_string(),
                        after_seq: last,
                    });
                }
            }
        }
        if valid < text.len() {
            file.set_len(valid as u64).map_err(io)?;
        }
        Ok(DecisionLog {
            out: BufWriter::new(file),
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
        let mut line = serde_json::to_vec(&DecisionLine::of(d)).expect("serializable");
        line.push(b'\n');
        self.out.write_all(&line).map_err(|e| self.io(e))?;
        self.last = d.seq();
        Ok(())
    }

    /// Hands buffered lines to the OS.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| self.io(e))
    }

    fn io(&self, e: std::io::Error) -> Error {
        Error::Io {
            path: self.path.display().to_string(),
            source: e,
        }
    }
}

/// Reads a decisions log (for tests and tools).
pub fn read_log(path: &Path) -> Result<Vec<DecisionLine>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    Ok(text.lines().map_while(|l| serde_json::from_str(l).ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let path = dir.path().join("d.jsonl");
        let mut log = DecisionLog::open(&path).expect("open");
        for s in 1..=3 {
            log.append(&decision(s)).expect("append");
        }
        log.append(&decision(2)).expect("a re-delivery is skipped");
        assert!(log.append(&decision(5)).is_err(), "gap");
        log.flush().expect("flush");
        drop(log);
        let mut f = OpenOptions::new().append(true).open(&path).expect("open");
        f.write_all(b"{\"seq\":4,\"vi").expect("torn write");
        drop(f);
        let log = DecisionLog::open(&path).expect("reopen");
        assert_eq!(log.last(), 3);
        let lines = read_log(&path).expect("read");
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2], DecisionLine::of(&decision(3)));
        // corruption in the middle fails loudly
        let text = std::fs::read_to_string(&path).expect("read");
        std::fs::write(&path, text.replacen("\"seq\":2", "\"seq\":7", 1)).expect("write");
        assert!(matches!(
            DecisionLog::open(&path),
            Err(Error::CorruptLog { after_seq: 1, .. })
        ));
    }
}
