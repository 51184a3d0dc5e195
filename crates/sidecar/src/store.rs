//! The sidecar's append-only block store (FX §3.1): every committed block, with the final
//! status of each of its txs, in block order, fsync'ed before the block is acknowledged.
//!
//! # Layout
//! A directory of segment files `<first block, 20 digits>.blocks`, each a sequence of
//! records, plus a `LOCK` file held (advisory lock) by the one open writer. A record is
//!
//! ```text
//! magic "FXBK" ‖ len: u32 ‖ number: u64 ‖ payload_crc: u32 ‖ header_crc: u32 ‖ payload
//! payload = count: u32 ‖ count × (code: u32 ‖ id_len: u32 ‖ id) ‖ block bytes
//! ```
//!
//! (integers little-endian, CRC-32C; `header_crc` covers the 20 bytes before it). A new
//! segment starts when the current one would grow past [`StoreConfig::segment_bytes`].
//!
//! # Crash behavior
//! An append writes one record and `fdatasync`s it before returning. On open every record
//! is checked: block numbers must be consecutive across segments (a store never holds two
//! records for one block number). A torn tail — a header cut short, a valid header whose
//! payload runs past the end of the file, or a last record failing its CRC — is the trace
//! of an append that never returned; it is cut off, and the caller appends that block
//! again. A bad record followed by a valid record header, a bad record in a segment other
//! than the last, or a record with a valid CRC that does not decode is corruption: `open`
//! fails with [`Error::StoreCorrupt`] instead of skipping data.
//!
//! # Sharing
//! [`BlockStore`] is the single writer; [`BlockStore::reader`] hands out cheap
//! [`StoreReader`] clones for lookups. The index (block locations and tx statuses) sits
//! behind a lock taken only to update it after the fsync, so lookups never wait for disk
//! writes. The tx-status index lives in memory and is rebuilt from the records on open.

use crate::{Error, Result};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use types::{Height, Status, TxId};

const CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
const MAGIC: [u8; 4] = *b"FXBK";
/// Length of a record header in bytes.
pub const HEADER_LEN: usize = 24;
const SEGMENT_SUFFIX: &str = ".blocks";

/// Configuration of a [`BlockStore`].
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The first block of the store. `None`: adopt the first block of an existing store,
    /// or start an empty store at block 0. `Some(n)`: start an empty store at `n`; an
    /// existing store that starts elsewhere is refused.
    pub first_block: Option<u64>,
    /// A segment file is closed once the next record would make it larger than this
    /// (a single larger record still gets a segment of its own).
    pub segment_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            first_block: None,
            segment_bytes: 64 << 20,
        }
    }
}

/// A block as stored: its encoded bytes and the final status of each tx, by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBlock {
    /// Block number.
    pub number: u64,
    /// The encoded block, as appended.
    pub block: Vec<u8>,
    /// (id, status) of every tx, in tx order.
    pub statuses: Vec<(TxId, Status)>,
}

/// Where a record lives.
#[derive(Debug, Clone, Copy)]
struct Loc {
    segment: usize,
    /// Offset of the record header in its segment.
    offset: u64,
    /// Payload length.
    len: u32,
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    file: Arc<File>,
}

/// The index shared by the writer and the readers.
#[derive(Debug)]
struct Index {
    first_block: u64,
    segments: Vec<Segment>,
    /// Location of block `first_block + i`.
    blocks: Vec<Loc>,
    /// Stored statuses (never 100–102), first occurrence of an id wins.
    txs: HashMap<TxId, (Status, Height)>,
}

impl Index {
    fn next_block(&self) -> u64 {
        self.first_block + self.blocks.len() as u64
    }

    fn add(&mut self, number: u64, loc: Loc, statuses: &[(TxId, Status)]) {
        debug_assert_eq!(number, self.next_block());
        self.blocks.push(loc);
        for (i, (id, status)) in statuses.iter().enumerate() {
            if status.is_stored() {
                self.txs
                    .entry(id.clone())
                    .or_insert((*status, Height::new(number, i as u32)));
            }
        }
    }
}

/// Read access to a [`BlockStore`]; cheap to clone, shareable across threads.
#[derive(Debug, Clone)]
pub struct StoreReader {
    shared: Arc<RwLock<Index>>,
}

impl StoreReader {
    fn index(&self) -> RwLockReadGuard<'_, Index> {
        self.shared.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The first block this store holds (or will hold).
    pub fn first_block(&self) -> u64 {
        self.index().first_block
    }

    /// The number of the next block to append.
    pub fn next_block(&self) -> u64 {
        self.index().next_block()
    }

    /// The final status and height of a tx, if a block of this store holds it with a
    /// stored status (statuses 100–102 are never indexed; the first stored one wins).
    pub fn tx_status(&self, id: &TxId) -> Option<(Status, Height)> {
        self.index().txs.get(id).copied()
    }

    /// Block `number` with its statuses; `None` if it is not (yet) in this store. The
    /// record is read from disk and its CRC checked again.
    pub fn get_block(&self, number: u64) -> Result<Option<StoredBlock>> {
        let (loc, path, file) = {
            let index = self.index();
            let Some(i) = number.checked_sub(index.first_block) else {
                return Ok(None);
            };
            let Some(loc) = usize::try_from(i).ok().and_then(|i| index.blocks.get(i)).copied() else {
                return Ok(None);
            };
            let seg = &index.segments[loc.segment];
            (loc, seg.path.clone(), seg.file.clone())
        };
        let mut buf = vec![0u8; HEADER_LEN + loc.len as usize];
        file.read_exact_at(&mut buf, loc.offset)
            .map_err(|e| io_err(&path, e))?;
        let corrupt = |detail: &str| Error::StoreCorrupt {
            path: path.display().to_string(),
            offset: loc.offset,
            detail: detail.to_string(),
        };
        let header = Header::parse(&buf).ok_or_else(|| corrupt("bad record header on read"))?;
        if header.number != number || header.len != loc.len {
            return Err(corrupt("record header does not match the index"));
        }
        let payload = &buf[HEADER_LEN..];
        if CRC32.checksum(payload) != header.payload_crc {
            return Err(corrupt("payload CRC mismatch on read"));
        }
        let (statuses, block) = decode_payload(payload).map_err(|d| corrupt(&d))?;
        Ok(Some(StoredBlock {
            number,
            block: block.to_vec(),
            statuses,
        }))
    }
}

/// The append-only block store (single writer). See the module docs for format and
/// crash behavior.
#[derive(Debug)]
pub struct BlockStore {
    dir: PathBuf,
    config: StoreConfig,
    /// The last segment, opened for appending.
    file: File,
    /// Valid length of the last segment.
    segment_len: u64,
    reader: StoreReader,
    /// Set when an append failed half-way: the store must be reopened (which repairs).
    poisoned: bool,
    _lock: File,
}

fn io_err(path: &Path, source: std::io::Error) -> Error {
    Error::StoreIo {
        path: path.display().to_string(),
        source,
    }
}

fn segment_name(first: u64) -> String {
    format!("{first:020}{SEGMENT_SUFFIX}")
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(dir, e))
}

/// The segments of `dir`, sorted by first block.
fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut segs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(SEGMENT_SUFFIX)) else {
            continue;
        };
        if let Ok(first) = stem.parse::<u64>() {
            segs.push((first, entry.path()));
        }
    }
    segs.sort();
    Ok(segs)
}

impl BlockStore {
    /// Opens (or creates) the store in `dir` with the default configuration.
    pub fn open(dir: impl AsRef<Path>) -> Result<BlockStore> {
        BlockStore::open_with(dir, StoreConfig::default())
    }

    /// Opens (or creates) the store in `dir`: checks every record, cuts off a torn tail,
    /// rebuilds the index. Fails on corruption, on a first block other than the
    /// configured one, and if another writer holds the store.
    pub fn open_with(dir: impl AsRef<Path>, config: StoreConfig) -> Result<BlockStore> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        let lock_path = dir.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_err(&lock_path, e))?;
        lock.try_lock().map_err(|_| Error::StoreLocked {
            path: dir.display().to_string(),
        })?;
        let mut found = list_segments(&dir)?;
        if found.is_empty() {
            let first = config.first_block.unwrap_or(0);
            let path = dir.join(segment_name(first));
            File::create(&path).map_err(|e| io_err(&path, e))?;
            sync_dir(&dir)?;
            found.push((first, path));
        }
        let first_block = found[0].0;
        if let Some(configured) = config.first_block
            && configured != first_block
        {
            return Err(Error::StoreFirstBlockMismatch {
                stored: first_block,
                configured,
            });
        }
        let mut index = Index {
            first_block,
            segments: Vec::new(),
            blocks: Vec::new(),
            txs: HashMap::new(),
        };
        let last = found.len() - 1;
        let mut segment_len = 0;
        for (i, (first, path)) in found.into_iter().enumerate() {
            segment_len = load_segment(&mut index, i, first, &path, i == last)?;
            let file = OpenOptions::new()
                .read(true)
                .open(&path)
                .map_err(|e| io_err(&path, e))?;
            index.segments.push(Segment {
                path,
                file: Arc::new(file),
            });
        }
        let last_path = index.segments[last].path.clone();
        let file = OpenOptions::new()
            .append(true)
            .open(&last_path)
            .map_err(|e| io_err(&last_path, e))?;
        Ok(BlockStore {
            dir,
            config,
            file,
            segment_len,
            reader: StoreReader {
                shared: Arc::new(RwLock::new(index)),
            },
            poisoned: false,
            _lock: lock,
        })
    }

    fn index_mut(&self) -> RwLockWriteGuard<'_, Index> {
        self.reader.shared.write().unwrap_or_else(|e| e.into_inner())
    }

    /// A read handle sharing this store's index.
    pub fn reader(&self) -> StoreReader {
        self.reader.clone()
    }

    /// The first block this store holds (or will hold).
    pub fn first_block(&self) -> u64 {
        self.reader.first_block()
    }

    /// The number of the next block to append.
    pub fn next_block(&self) -> u64 {
        self.reader.next_block()
    }

    /// See [`StoreReader::get_block`].
    pub fn get_block(&self, number: u64) -> Result<Option<StoredBlock>> {
        self.reader.get_block(number)
    }

    /// See [`StoreReader::tx_status`].
    pub fn tx_status(&self, id: &TxId) -> Option<(Status, Height)> {
        self.reader.tx_status(id)
    }

    /// Appends block `number` (which must be [`BlockStore::next_block`]) with the final
    /// statuses of its txs, in tx order, and returns once the record is durable. After an
    /// I/O failure the store refuses further appends ([`Error::StorePoisoned`]); reopen it.
    pub fn append(&mut self, number: u64, block: &[u8], statuses: &[(TxId, Status)]) -> Result<()> {
        if self.poisoned {
            return Err(Error::StorePoisoned);
        }
        let expected = self.next_block();
        if number != expected {
            return Err(Error::StoreOutOfOrder {
                expected,
                got: number,
            });
        }
        let record = encode_record(number, block, statuses)?;
        if self.segment_len > 0 && self.segment_len + record.len() as u64 > self.config.segment_bytes {
            self.roll(number)?;
        }
        let offset = self.segment_len;
        let written = self.file.write_all(&record).and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            self.poisoned = true;
            let _ = self.file.set_len(offset);
            let path = self.last_path();
            return Err(io_err(&path, e));
        }
        self.segment_len += record.len() as u64;
        let mut index = self.index_mut();
        let loc = Loc {
            segment: index.segments.len() - 1,
            offset,
            len: (record.len() - HEADER_LEN) as u32,
        };
        index.add(number, loc, statuses);
        Ok(())
    }

    fn last_path(&self) -> PathBuf {
        let index = self.reader.index();
        index.segments[index.segments.len() - 1].path.clone()
    }

    /// Starts segment `first`.
    fn roll(&mut self, first: u64) -> Result<()> {
        let path = self.dir.join(segment_name(first));
        let create = || -> std::io::Result<(File, File)> {
            let append = OpenOptions::new().append(true).create_new(true).open(&path)?;
            let read = OpenOptions::new().read(true).open(&path)?;
            Ok((append, read))
        };
        let (append, read) = create().map_err(|e| {
            self.poisoned = true;
            io_err(&path, e)
        })?;
        sync_dir(&self.dir).inspect_err(|_| self.poisoned = true)?;
        self.file = append;
        self.segment_len = 0;
        self.index_mut().segments.push(Segment {
            path,
            file: Arc::new(read),
        });
        Ok(())
    }
}

/// Checks and indexes segment number `seg` (first block `first`); cuts a torn tail if it
/// is the last segment. Returns the segment's valid length.
fn load_segment(index: &mut Index, seg: usize, first: u64, path: &Path, last: bool) -> Result<u64> {
    let corrupt = |offset: u64, detail: String| Error::StoreCorrupt {
        path: path.display().to_string(),
        offset,
        detail,
    };
    if first != index.next_block() {
        return Err(corrupt(
            0,
            format!("segment starts at block {first}, expected {}", index.next_block()),
        ));
    }
    let buf = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let scan = scan_records(&buf, first).map_err(|(offset, detail)| corrupt(offset as u64, detail))?;
    for r in &scan.records {
        let loc = Loc {
            segment: seg,
            offset: r.offset as u64,
            len: r.len,
        };
        let (statuses, _) =
            decode_payload(&buf[r.offset + HEADER_LEN..r.offset + HEADER_LEN + r.len as usize])
                .map_err(|d| corrupt(r.offset as u64, d))?;
        index.add(r.number, loc, &statuses);
    }
    if scan.valid < buf.len() {
        if !last {
            return Err(corrupt(
                scan.valid as u64,
                "bad record at the end of a segment that is not the last".into(),
            ));
        }
        tracing::warn!(
            path = %path.display(),
            valid = scan.valid,
            len = buf.len(),
            "cutting off a torn record at the end of the block store"
        );
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| io_err(path, e))?;
        file.set_len(scan.valid as u64)
            .and_then(|()| file.sync_all())
            .map_err(|e| io_err(path, e))?;
    }
    Ok(scan.valid as u64)
}

/// A decoded record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    len: u32,
    number: u64,
    payload_crc: u32,
}

impl Header {
    /// The header at the start of `buf`, if its magic and CRC are valid.
    fn parse(buf: &[u8]) -> Option<Header> {
        let h = buf.get(..HEADER_LEN)?;
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        if h[..4] != MAGIC || CRC32.checksum(&h[..20]) != u32_at(20) {
            return None;
        }
        Some(Header {
            len: u32_at(4),
            number: u64::from_le_bytes(h[8..16].try_into().expect("8 bytes")),
            payload_crc: u32_at(16),
        })
    }

    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(&MAGIC);
        h[4..8].copy_from_slice(&self.len.to_le_bytes());
        h[8..16].copy_from_slice(&self.number.to_le_bytes());
        h[16..20].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = CRC32.checksum(&h[..20]);
        h[20..].copy_from_slice(&crc.to_le_bytes());
        h
    }
}

/// Encodes one record (header and payload).
fn encode_record(number: u64, block: &[u8], statuses: &[(TxId, Status)]) -> Result<Vec<u8>> {
    let ids: usize = statuses.iter().map(|(id, _)| 8 + id.0.len()).sum();
    let mut out = Vec::with_capacity(HEADER_LEN + 4 + ids + block.len());
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    out.extend_from_slice(&(statuses.len() as u32).to_le_bytes());
    for (id, status) in statuses {
        out.extend_from_slice(&status.code().to_le_bytes());
        out.extend_from_slice(&(id.0.len() as u32).to_le_bytes());
        out.extend_from_slice(id.0.as_bytes());
    }
    out.extend_from_slice(block);
    let len = u32::try_from(out.len() - HEADER_LEN).map_err(|_| Error::StoreRecordTooLarge {
        number,
        bytes: out.len() - HEADER_LEN,
    })?;
    let header = Header {
        len,
        number,
        payload_crc: CRC32.checksum(&out[HEADER_LEN..]),
    };
    out[..HEADER_LEN].copy_from_slice(&header.encode());
    Ok(out)
}

/// A decoded payload: statuses and the block bytes.
type Decoded<'a> = (Vec<(TxId, Status)>, &'a [u8]);

/// Decodes a payload into statuses and block bytes.
fn decode_payload(p: &[u8]) -> std::result::Result<Decoded<'_>, String> {
    fn take<'a>(p: &'a [u8], pos: &mut usize, n: usize, what: &str) -> std::result::Result<&'a [u8], String> {
        let v = pos
            .checked_add(n)
            .and_then(|end| p.get(*pos..end))
            .ok_or_else(|| format!("payload ends inside {what}"))?;
        *pos += n;
        Ok(v)
    }
    let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
    let mut pos = 0usize;
    let count = u32_of(take(p, &mut pos, 4, "the status count")?) as usize;
    let mut statuses = Vec::with_capacity(count.min(p.len() / 8));
    for _ in 0..count {
        let code = u32_of(take(p, &mut pos, 4, "a status")?);
        let len = u32_of(take(p, &mut pos, 4, "a status")?) as usize;
        let status = Status::from_code(code).map_err(|e| e.to_string())?;
        let raw = take(p, &mut pos, len, "a tx id")?;
        let id = String::from_utf8(raw.to_vec()).map_err(|_| "tx id is not UTF-8".to_string())?;
        statuses.push((TxId(id), status));
    }
    Ok((statuses, &p[pos..]))
}

/// A record found by [`scan_records`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Found {
    number: u64,
    offset: usize,
    len: u32,
}

/// The records of a segment and the length of its valid prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Scan {
    records: Vec<Found>,
    valid: usize,
}

/// Scans a segment whose first record is block `first`. Stops at a torn tail; returns
/// `Err((offset, detail))` on corruption. Pure.
fn scan_records(buf: &[u8], first: u64) -> std::result::Result<Scan, (usize, String)> {
    let mut records = Vec::new();
    let mut pos = 0;
    let mut expected = first;
    while pos < buf.len() {
        let Some(header) = Header::parse(&buf[pos..]) else {
            // A bad header is a torn tail unless a valid record header follows it.
            if buf.len() - pos >= HEADER_LEN
                && (pos + 1..buf.len()).any(|p| Header::parse(&buf[p..]).is_some())
            {
                return Err((pos, "bad record header followed by valid records".into()));
            }
            break;
        };
        if header.number != expected {
            return Err((
                pos,
                format!("record of block {}, expected block {expected}", header.number),
            ));
        }
        let end = pos + HEADER_LEN + header.len as usize;
        if end > buf.len() {
            break; // the header made it to disk, the payload did not
        }
        if CRC32.checksum(&buf[pos + HEADER_LEN..end]) != header.payload_crc {
            if end == buf.len() {
                break; // torn last record
            }
            return Err((pos, format!("payload CRC mismatch in block {expected}")));
        }
        records.push(Found {
            number: expected,
            offset: pos,
            len: header.len,
        });
        expected += 1;
        pos = end;
    }
    Ok(Scan { records, valid: pos })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: u64, body: &[u8]) -> Vec<u8> {
        encode_record(n, body, &[(TxId(format!("t{n}")), Status::Committed)]).unwrap()
    }

    #[test]
    fn payload_roundtrip() {
        let statuses = vec![
            (TxId("a".into()), Status::Committed),
            (TxId("".into()), Status::MalformedMissingTxId),
            (TxId("é".into()), Status::AbortedMvccConflict),
        ];
        let r = encode_record(7, b"block", &statuses).unwrap();
        let h = Header::parse(&r).unwrap();
        assert_eq!((h.number, h.len as usize), (7, r.len() - HEADER_LEN));
        let (s, b) = decode_payload(&r[HEADER_LEN..]).unwrap();
        assert_eq!((s, b), (statuses, &b"block"[..]));
    }

    #[test]
    fn scan_cases() {
        let (a, b, c) = (rec(5, b"aa"), rec(6, b"bbb"), rec(7, b"c"));
        let all = [a.clone(), b.clone(), c.clone()].concat();
        let full = scan_records(&all, 5).unwrap();
        assert_eq!(full.records.len(), 3);
        assert_eq!(full.valid, all.len());
        // Wrong first block: corruption, not truncation.
        assert_eq!(scan_records(&all, 4).unwrap_err().0, 0);
        // Every cut inside the last record is torn.
        for cut in a.len() + b.len()..all.len() {
            let s = scan_records(&all[..cut], 5).unwrap();
            assert_eq!((s.records.len(), s.valid), (2, a.len() + b.len()), "cut {cut}");
        }
        // A flipped byte anywhere in the middle record is corruption at its offset.
        for i in 0..b.len() {
            let mut bad = all.clone();
            bad[a.len() + i] ^= 0x40;
            assert_eq!(scan_records(&bad, 5).unwrap_err().0, a.len(), "byte {i}");
        }
        // A flipped byte in the last record is a torn tail.
        for i in 0..c.len() {
            let mut bad = all.clone();
            bad[a.len() + b.len() + i] ^= 0x01;
            assert_eq!(
                scan_records(&bad, 5).unwrap().valid,
                a.len() + b.len(),
                "byte {i}"
            );
        }
        // A duplicate record for one block number is corruption.
        let dup = [a.clone(), a.clone()].concat();
        assert_eq!(scan_records(&dup, 5).unwrap_err().0, a.len());
        // Zeros after the last record (extended but unwritten file) are torn.
        let zeros = [a.clone(), vec![0u8; 100]].concat();
        assert_eq!(scan_records(&zeros, 5).unwrap().valid, a.len());
    }
}
