//! A block store on the [`journal`]: blocks in number order, each with its tx ids and
//! (optionally) their final statuses, plus two on-disk indexes that are read, not
//! rebuilt, when the store is opened. Used by the committer's sidecar; meant for the
//! assembler and the batchers too.
//!
//! # Layout
//! One directory: the journal (`LOCK`, segments `<first block, 20 digits>.blocks`, one
//! record per block, the record's sequence number is the block number) and
//!
//! * `blocks.idx` — block number → journal [`journal::Position`], fixed 24-byte
//!   entries (CRC'd), entry `i` for block `base + i`;
//! * `txs.idx` — tx id → (block number, tx index): an open-addressing hash table of
//!   32-byte slots holding a 64-bit fingerprint of the id. While the file is at most
//!   [`LedgerConfig::tx_table_memory_bytes`] it is also held in memory: probes and
//!   inserts touch memory only, and the changed pages are written to the file at each
//!   checkpoint; a larger table is read and written with `read_at`/`write_at`. A hit is
//!   verified against the id stored in the block's record (a small read), so a
//!   fingerprint collision or a torn slot never gives a wrong answer. The first
//!   occurrence of an id wins;
//! * `index.meta` — the indexes' durable *watermark*: every block below it is in both
//!   indexes and the index files were synced before the watermark was written
//!   (atomically: temporary file, rename, directory sync).
//!
//! A record's payload is `number: u64 ‖ count: u32 ‖ count × (status code: u32 ‖
//! id_len: u32 ‖ id) ‖ block bytes` (code `u32::MAX`: no status).
//!
//! # Crash behaviour
//! [`Ledger::append`] appends the record (synced, by default), then updates the indexes
//! without syncing them (the tx table possibly only in memory); every
//! [`LedgerConfig::checkpoint_every`] blocks (and on drop) it writes the tx table's
//! changed pages, syncs the index files and advances the watermark. On open the journal applies its
//! torn-tail rule (a torn tail is cut, corruption is an error), then only the records at
//! or above the watermark are indexed again: a crash between the journal append and the
//! index update costs re-indexing at most `checkpoint_every` blocks, never a full
//! rebuild. Re-indexing is idempotent (an id already present for that tx is left alone).
//! If the journal holds fewer blocks than the indexes know of (it lost synced data, or a
//! test cut it), the stale index entries are dropped: the tx table is rebuilt from its
//! own slots, still without reading the blocks.
//!
//! # Sharing
//! [`Ledger`] is the single writer; [`Ledger::reader`] hands out cheap [`LedgerReader`]
//! clones. A block becomes visible to readers once it is in both indexes.

mod entry;
mod files;
mod store;
mod txtable;

use std::num::{NonZeroU32, NonZeroU64};
use std::path::PathBuf;

pub use entry::ENTRY_HEADER_LEN;
pub use store::{Ledger, LedgerReader};
use types::{Height, Status, TxId};

/// Configuration of a [`Ledger`].
#[derive(Debug, Clone)]
pub struct LedgerConfig {
    /// The first block of the store. `None`: adopt the first block of an existing
    /// store, or start an empty store at block 0. `Some(n)`: start an empty store at
    /// `n`; an existing store that starts elsewhere is refused.
    pub first_block: Option<u64>,
    /// Journal segment size (see [`journal::Config::segment_bytes`]).
    pub segment_bytes: NonZeroU64,
    /// Largest record (block bytes plus tx list plus 12 bytes).
    pub max_record_bytes: NonZeroU32,
    /// Blocks between two index checkpoints (index files synced, watermark advanced):
    /// at most this many blocks are re-indexed after a crash.
    pub checkpoint_every: NonZeroU32,
    /// When appended blocks are durable ([`journal::Durability::SyncEachAppend`]
    /// unless a test says otherwise).
    pub durability: journal::Durability,
    /// Most bytes of the tx-id table (`txs.idx`, 32 bytes a slot, at most 70 % full)
    /// held in memory. While the table fits, lookups and appends probe memory and the
    /// changed slots are written to the file at each checkpoint; a larger table is
    /// probed and written in its file (a system call per probe). 0: always in the file.
    /// Default 64 MiB (about 1.4 million tx ids).
    pub tx_table_memory_bytes: u64,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            first_block: None,
            segment_bytes: NonZeroU64::new(64 << 20).unwrap_or(NonZeroU64::MIN),
            max_record_bytes: NonZeroU32::new(1 << 30).unwrap_or(NonZeroU32::MIN),
            checkpoint_every: NonZeroU32::new(256).unwrap_or(NonZeroU32::MIN),
            durability: journal::Durability::SyncEachAppend,
            tx_table_memory_bytes: 64 << 20,
        }
    }
}

/// A tx of a block as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerTx {
    /// Its id.
    pub id: TxId,
    /// Its final status, when the writer knows it (the committer does; the orderer's
    /// stores do not). Txs with a status that [`Status::is_stored`] refuses are kept in
    /// the block but not indexed by id.
    pub status: Option<Status>,
}

impl LedgerTx {
    /// The same tx, borrowed.
    pub fn borrowed(&self) -> LedgerTxRef<'_> {
        LedgerTxRef {
            id: &self.id.0,
            status: self.status,
        }
    }
}

/// A tx of a block to append, borrowed: [`Ledger::append_borrowed`] stores the same
/// record as [`Ledger::append`] without the caller cloning its ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerTxRef<'a> {
    /// Its id.
    pub id: &'a str,
    /// Its final status, as in [`LedgerTx::status`].
    pub status: Option<Status>,
}

/// A block as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockEntry {
    /// Block number.
    pub number: u64,
    /// The encoded block, as appended.
    pub block: Vec<u8>,
    /// Its txs, in tx order.
    pub txs: Vec<LedgerTx>,
}

/// Where the tx-id index found a tx.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxLocation {
    /// Block number and index in the block.
    pub height: Height,
    /// The status stored with it.
    pub status: Option<Status>,
}

/// Errors of the ledger.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The journal failed (I/O, corruption, lock, poisoned).
    #[error("ledger journal: {source}")]
    Journal {
        /// The journal's error.
        #[from]
        source: journal::Error,
    },
    /// An I/O operation on an index file failed.
    #[error("ledger index i/o on {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An index file or a record is inconsistent.
    #[error("ledger {} corrupt: {detail}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A block appended out of order.
    #[error("ledger expects block {expected}, got {got}")]
    OutOfOrder {
        /// The next block number.
        expected: u64,
        /// The number appended.
        got: u64,
    },
    /// The store starts at another block than configured.
    #[error("ledger starts at block {stored}, configured {configured}")]
    FirstBlockMismatch {
        /// The first block of the existing store.
        stored: u64,
        /// The configured first block.
        configured: u64,
    },
    /// A block whose record is over [`LedgerConfig::max_record_bytes`].
    #[error("block {number} record is {bytes} bytes, over the record limit")]
    BlockTooLarge {
        /// The block number.
        number: u64,
        /// Its encoded size.
        bytes: usize,
    },
    /// An earlier append failed half-way; the ledger must be reopened.
    #[error("ledger refuses appends after a failed write; reopen it")]
    Poisoned,
}

/// Result alias of the ledger.
pub type Result<T> = std::result::Result<T, Error>;
