//! Readers: by position, and replay from a sequence number.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use crate::format::{HEADER_LEN, Header};
use crate::segments::{self, corrupt};
use crate::{Config, Error, Position, Result, io_err};

/// An open segment file (read handle).
#[derive(Debug)]
pub(crate) struct Seg {
    pub path: PathBuf,
    pub file: File,
}

impl Seg {
    pub fn open(path: PathBuf) -> Result<Arc<Seg>> {
        let file = File::open(&path).map_err(io_err(&path))?;
        Ok(Arc::new(Seg { path, file }))
    }
}

/// What the writer and its readers share.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Segments by first sequence number.
    pub segments: BTreeMap<u64, Arc<Seg>>,
    /// Sequence number of the next record to append.
    pub next_seq: u64,
}

/// Read access to a journal; cheap to clone, shareable across threads. A reader handed
/// out by [`crate::Journal::reader`] sees every append once it returned.
#[derive(Debug, Clone)]
pub struct JournalReader {
    pub(crate) state: Arc<RwLock<State>>,
    pub(crate) max_len: u32,
}

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its sequence number.
    pub seq: u64,
    /// Where it lives.
    pub position: Position,
    /// Its payload.
    pub payload: Vec<u8>,
}

impl JournalReader {
    /// Reads a journal that another process (or another open journal) may be writing,
    /// without taking its lock and without repairing anything: a torn tail is not part
    /// of what it sees, corruption is an error. It sees the records present now.
    pub fn open_read_only(dir: &Path, config: &Config) -> Result<JournalReader> {
        let found = segments::list(dir, config.extension)?;
        let max_len = config.max_record_bytes.get();
        let mut state = State {
            segments: BTreeMap::new(),
            next_seq: config.first_seq,
        };
        if let Some((first, _)) = found.last() {
            let last = segments::check(&found, max_len)?;
            state.next_seq = first + last.scan.records.len() as u64;
        }
        for (first, path) in found {
            state.segments.insert(first, Seg::open(path)?);
        }
        Ok(JournalReader {
            state: Arc::new(RwLock::new(state)),
            max_len,
        })
    }

    fn state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Sequence number of the oldest record held (or of the next one, when empty).
    pub fn first_seq(&self) -> u64 {
        let state = self.state();
        state.segments.keys().next().copied().unwrap_or(state.next_seq)
    }

    /// Sequence number of the next record to append.
    pub fn next_seq(&self) -> u64 {
        self.state().next_seq
    }

    fn segment(&self, first: u64) -> Result<Arc<Seg>> {
        self.state()
            .segments
            .get(&first)
            .cloned()
            .ok_or(Error::NoSegment { segment: first })
    }

    /// The payload of the record at `pos`, its header and CRC checked again.
    pub fn read(&self, pos: Position) -> Result<Vec<u8>> {
        let seg = self.segment(pos.segment)?;
        let mut buf = vec![0u8; HEADER_LEN + pos.len as usize];
        seg.file
            .read_exact_at(&mut buf, pos.offset)
            .map_err(io_err(&seg.path))?;
        let bad = |detail: &str| corrupt(&seg.path, pos.offset, pos.segment, detail.into());
        let header = Header::parse(&buf).ok_or_else(|| bad("bad record header on read"))?;
        if header.len != pos.len {
            return Err(bad("record length does not match the position"));
        }
        if !header.matches(&buf[HEADER_LEN..]) {
            return Err(bad("record CRC mismatch on read"));
        }
        buf.drain(..HEADER_LEN);
        Ok(buf)
    }

    /// `len` bytes of the payload of the record at `pos`, from byte `start` of the
    /// payload, **without** checking the record's CRC (for an index that verifies what
    /// it reads itself). Fails if the range is outside the payload.
    pub fn read_unchecked(&self, pos: Position, start: u32, len: u32) -> Result<Vec<u8>> {
        let seg = self.segment(pos.segment)?;
        if u64::from(start) + u64::from(len) > u64::from(pos.len) {
            let detail = format!("range {start}+{len} outside a payload of {} bytes", pos.len);
            return Err(corrupt(&seg.path, pos.offset, pos.segment, detail));
        }
        let mut buf = vec![0u8; len as usize];
        let at = pos.offset + HEADER_LEN as u64 + u64::from(start);
        seg.file.read_exact_at(&mut buf, at).map_err(io_err(&seg.path))?;
        Ok(buf)
    }

    /// The records from sequence number `from` (or from the oldest one, if `from` was
    /// removed) up to the last one appended now, in order, every CRC checked.
    pub fn replay(&self, from: u64) -> Replay {
        let state = self.state();
        let segs: Vec<(u64, Arc<Seg>)> = state
            .segments
            .iter()
            .map(|(first, seg)| (*first, seg.clone()))
            .collect();
        let start = segs.iter().rposition(|(first, _)| *first <= from).unwrap_or(0);
        let seq = segs.get(start).map_or(state.next_seq, |(first, _)| *first);
        Replay {
            segs,
            current: start,
            offset: 0,
            seq,
            from,
            end: state.next_seq,
            max_len: self.max_len,
            failed: false,
        }
    }
}

/// Iterator over records, from [`JournalReader::replay`]. Stops after the first error.
#[derive(Debug)]
pub struct Replay {
    segs: Vec<(u64, Arc<Seg>)>,
    current: usize,
    offset: u64,
    seq: u64,
    from: u64,
    end: u64,
    max_len: u32,
    failed: bool,
}

impl Replay {
    /// Reads the record at the cursor (its payload only if `with_payload`) and moves on.
    fn step(&mut self, with_payload: bool) -> Result<Option<Record>> {
        while self
            .segs
            .get(self.current + 1)
            .is_some_and(|(first, _)| *first <= self.seq)
        {
            self.current += 1;
            self.offset = 0;
        }
        let (first, seg) = &self.segs[self.current];
        let bad = |offset: u64, seq: u64, detail: &str| corrupt(&seg.path, offset, seq, detail.into());
        let mut header = [0u8; HEADER_LEN];
        seg.file
            .read_exact_at(&mut header, self.offset)
            .map_err(|_| bad(self.offset, self.seq, "record missing"))?;
        let h = Header::parse(&header).ok_or_else(|| bad(self.offset, self.seq, "bad record header"))?;
        if h.len > self.max_len {
            return Err(bad(self.offset, self.seq, "record over the maximum length"));
        }
        let position = Position {
            segment: *first,
            offset: self.offset,
            len: h.len,
        };
        let mut record = None;
        if with_payload {
            let mut payload = vec![0u8; h.len as usize];
            seg.file
                .read_exact_at(&mut payload, self.offset + HEADER_LEN as u64)
                .map_err(|_| bad(self.offset, self.seq, "record cut short"))?;
            if !h.matches(&payload) {
                return Err(bad(self.offset, self.seq, "record CRC mismatch"));
            }
            record = Some(Record {
                seq: self.seq,
                position,
                payload,
            });
        }
        self.offset += HEADER_LEN as u64 + u64::from(h.len);
        self.seq += 1;
        Ok(record)
    }
}

impl Iterator for Replay {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        while !self.failed && self.seq < self.end {
            let wanted = self.seq >= self.from;
            match self.step(wanted) {
                Ok(Some(record)) => return Some(Ok(record)),
                Ok(None) => {}
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}
