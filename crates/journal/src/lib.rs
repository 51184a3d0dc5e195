//! One append-only, CRC-framed record log, under every fabrx log (the BFT WAL, the
//! consenter's decisions log, the ledger's block store).
//!
//! # Format
//! A journal is a directory holding a `LOCK` file (advisory lock of the one writer) and
//! segment files `<first seq, 20 digits>.<extension>`. Records are numbered by a global
//! sequence number; a segment holds consecutive records starting at the number in its
//! name, so segment `k` holds `[first_k, first_{k+1})`. A record is
//!
//! ```text
//! len: u32 LE ‖ len_crc: u32 LE ‖ crc: u32 LE ‖ payload (len bytes)
//! len_crc = crc32c(len)            crc = crc32c(len ‖ payload)
//! ```
//!
//! The length has a CRC of its own, so a corrupted length is detected at once instead of
//! sending the reader to a wrong place; a header of zeros is never valid. A new segment
//! starts when a record would grow the current one past [`Config::segment_bytes`].
//!
//! # The torn-tail rule
//! A *torn tail* is what an append interrupted by a crash leaves: a header cut short, a
//! valid header whose payload runs past the end of the file, a last record failing its
//! CRC, or any of these followed only by zero bytes (a file extended but not written,
//! after a power loss). On [`Journal::open`] a torn tail of the **last** segment is
//! truncated and appends continue after the last whole record. Anything else is
//! corruption and [`Error::Corrupt`], never silently cut:
//! * a bad header or a bad record followed by more non-zero data;
//! * a record longer than [`Config::max_record_bytes`];
//! * a segment other than the last that does not end exactly after its last record, or
//!   whose record count does not match the first sequence number of the next segment
//!   (a missing segment).
//!
//! (A power loss that persisted a record's later sectors but not its header, with the
//! file extended past it, is therefore reported as corruption: it cannot be told apart
//! from a corrupted length field in the middle of the log, and a journal never guesses.)
//!
//! On open the last segment is read and checked record by record; earlier segments
//! are checked by walking their headers. Every read ([`JournalReader::read`],
//! [`Replay`]) checks the record's CRC again.
//!
//! # Durability
//! [`Durability`] is a parameter: sync every append, let the caller sync
//! ([`Journal::sync`]), or never (tests). Segment files are synced before the next one
//! is created, and the directory is synced after a segment is created or removed.
//!
//! # Sharing
//! [`Journal`] is the single writer; [`Journal::reader`] hands out cheap
//! [`JournalReader`] clones that read by [`Position`] and replay from a sequence number.
//! [`JournalReader::open_read_only`] reads a journal another process writes.

mod format;
pub mod le;
mod reader;
mod segments;
mod writer;

use std::num::{NonZeroU32, NonZeroU64};
use std::path::PathBuf;

pub use format::HEADER_LEN;
pub use reader::{JournalReader, Record, Replay};
pub use writer::{Appended, Journal};

/// When appended records are made durable (fsync).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Every [`Journal::append`] returns once its record is durable (`fdatasync`).
    SyncEachAppend,
    /// Appends reach the OS; the caller makes them durable with [`Journal::sync`]
    /// (one sync for a batch of appends).
    Manual,
    /// Never sync, not even the directory. For tests only.
    NoSync,
}

/// Configuration of a [`Journal`], validated by [`Journal::open`].
#[derive(Debug, Clone)]
pub struct Config {
    /// A segment is closed once the next record would make it larger than this (a larger
    /// record still gets a segment of its own).
    pub segment_bytes: NonZeroU64,
    /// Largest payload accepted by [`Journal::append`]; a stored record over it is
    /// corruption.
    pub max_record_bytes: NonZeroU32,
    /// When appends are made durable.
    pub durability: Durability,
    /// Sequence number of the first record of a journal created by [`Journal::open`]
    /// (ignored when the journal exists).
    pub first_seq: u64,
    /// File name extension of the segment files (without the dot).
    pub extension: &'static str,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            segment_bytes: NonZeroU64::new(64 << 20).unwrap_or(NonZeroU64::MIN),
            max_record_bytes: NonZeroU32::new(64 << 20).unwrap_or(NonZeroU32::MIN),
            durability: Durability::SyncEachAppend,
            first_seq: 0,
            extension: "journal",
        }
    }
}

/// Where a record lives: enough to read it back without a scan (an index can hold it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    /// The segment, named by its first sequence number.
    pub segment: u64,
    /// Offset of the record header in the segment.
    pub offset: u64,
    /// Payload length.
    pub len: u32,
}

/// Errors of the journal.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation failed.
    #[error("journal i/o on {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A record that is neither valid nor a torn tail (see the crate docs).
    #[error("journal segment {} corrupt at offset {offset} (record {seq}): {detail}", segment.display())]
    Corrupt {
        /// The segment file.
        segment: PathBuf,
        /// Offset of the bad record's header.
        offset: u64,
        /// Sequence number the bad record holds or would hold.
        seq: u64,
        /// What is wrong.
        detail: String,
    },
    /// Another writer holds the journal.
    #[error("journal {} is locked by another writer", dir.display())]
    Locked {
        /// The journal directory.
        dir: PathBuf,
    },
    /// A payload over [`Config::max_record_bytes`].
    #[error("record of {len} bytes over the maximum of {max}")]
    RecordTooLarge {
        /// Payload length.
        len: usize,
        /// The configured maximum.
        max: u32,
    },
    /// An earlier append or sync failed; the journal must be reopened (which repairs).
    #[error("journal refuses appends after a failed write or sync; reopen it")]
    Poisoned,
    /// No segment starts at this sequence number (removed by
    /// [`Journal::truncate_front`], or never existed).
    #[error("no journal segment starting at record {segment}")]
    NoSegment {
        /// The first sequence number named by the position.
        segment: u64,
    },
    /// The configuration is unusable.
    #[error("journal configuration: {detail}")]
    Config {
        /// What is wrong.
        detail: String,
    },
}

/// Result alias of the journal.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}
