//! The sidecar's append-only block store (FX §3.1): every committed block, with the final
//! status of each of its txs, in block order, fsync'ed before the block is acknowledged.
//!
//! A thin adapter over [`ledger`]: a directory holding a journal of one record per block
//! (segments `<first block, 20 digits>.blocks`, a `LOCK` file held by the one open
//! writer) and the ledger's on-disk block-number and tx-id indexes. See the `ledger` and
//! `journal` crate docs for the format.
//!
//! # Crash behavior
//! An append writes one record and `fdatasync`s it before returning. On open the
//! journal's torn-tail rule applies: a torn tail — a header cut short, a payload running
//! past the end of the file, a last record failing its CRC, a zero-filled tail — is the
//! trace of an append that never returned; it is cut off, and the caller appends that
//! block again. A bad record before the tail (a corrupted length field included), a torn
//! tail in a segment other than the last, or a missing segment is corruption: `open`
//! fails with [`Error::StoreCorrupt`] instead of skipping data. Block numbers are
//! consecutive: the store never holds two records for one block number.
//!
//! # Sharing
//! [`BlockStore`] is the single writer; [`BlockStore::reader`] hands out cheap
//! [`StoreReader`] clones for lookups. The tx-status index lives on disk and is read,
//! not rebuilt, on open (only blocks past its last checkpoint are indexed again); while
//! it is at most [`StoreConfig::tx_index_memory_bytes`] it is also held in memory, so
//! lookups and appends make no system call for it.
//! Statuses 100–102 are never indexed; the first stored status of an id wins.

use crate::{Error, Result};
use ledger::{Ledger, LedgerConfig, LedgerReader, LedgerTxRef};
use std::num::NonZeroU64;
use std::path::Path;
use types::{Height, Status, TxId};

/// Bytes of a block record before its status list: the journal's record header and the
/// block number (a record is this, then `count: u32 ‖ count × (code: u32 ‖ id_len: u32 ‖
/// id) ‖ block bytes`).
pub const HEADER_LEN: usize = ledger::ENTRY_HEADER_LEN;

/// Configuration of a [`BlockStore`].
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The first block of the store. `None`: adopt the first block of an existing store,
    /// or start an empty store at block 0. `Some(n)`: start an empty store at `n`; an
    /// existing store that starts elsewhere is refused.
    pub first_block: Option<u64>,
    /// A segment file is closed once the next record would make it larger than this
    /// (a single larger record still gets a segment of its own). Must not be 0.
    pub segment_bytes: u64,
    /// Most bytes of the tx-status index held in memory (32 bytes a slot, at most 70 %
    /// full: the default 128 MiB holds about 2.9 million tx ids). A larger index is
    /// probed in its file, one system call per lookup. 0: always in the file.
    pub tx_index_memory_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            first_block: None,
            segment_bytes: 64 << 20,
            tx_index_memory_bytes: 128 << 20,
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

/// The sidecar's error for a ledger error.
fn store_error(e: ledger::Error) -> Error {
    use journal::Error as J;
    match e {
        ledger::Error::Journal {
            source: J::Io { path, source },
        }
        | ledger::Error::Io { path, source } => Error::StoreIo {
            path: path.display().to_string(),
            source,
        },
        ledger::Error::Journal {
            source:
                J::Corrupt {
                    segment,
                    offset,
                    detail,
                    ..
                },
        } => Error::StoreCorrupt {
            path: segment.display().to_string(),
            offset,
            detail,
        },
        ledger::Error::Journal {
            source: J::Locked { dir },
        } => Error::StoreLocked {
            path: dir.display().to_string(),
        },
        ledger::Error::Journal { source: J::Poisoned } | ledger::Error::Poisoned => Error::StorePoisoned,
        ledger::Error::Journal { source: other } => Error::Config {
            detail: format!("block store: {other}"),
        },
        ledger::Error::Corrupt { path, detail } => Error::StoreCorrupt {
            path: path.display().to_string(),
            offset: 0,
            detail,
        },
        ledger::Error::OutOfOrder { expected, got } => Error::StoreOutOfOrder { expected, got },
        ledger::Error::FirstBlockMismatch { stored, configured } => {
            Error::StoreFirstBlockMismatch { stored, configured }
        }
        ledger::Error::BlockTooLarge { number, bytes } => Error::StoreRecordTooLarge { number, bytes },
    }
}

/// Read access to a [`BlockStore`]; cheap to clone, shareable across threads.
#[derive(Debug, Clone)]
pub struct StoreReader {
    ledger: LedgerReader,
}

impl StoreReader {
    /// The first block this store holds (or will hold).
    pub fn first_block(&self) -> u64 {
        self.ledger.first_block()
    }

    /// The number of the next block to append.
    pub fn next_block(&self) -> u64 {
        self.ledger.next_block()
    }

    /// The final status and height of a tx, if a block of this store holds it with a
    /// stored status (statuses 100–102 are never indexed; the first stored one wins).
    /// Reads the on-disk index; an I/O error is logged and answers `None`.
    pub fn tx_status(&self, id: &TxId) -> Option<(Status, Height)> {
        match self.ledger.tx(id) {
            Ok(found) => found.and_then(|loc| Some((loc.status?, loc.height))),
            Err(e) => {
                tracing::warn!(tx = %id.0, error = %e, "block store tx lookup failed");
                None
            }
        }
    }

    /// Block `number` with its statuses; `None` if it is not (yet) in this store. The
    /// record is read from disk and its CRC checked again.
    pub fn get_block(&self, number: u64) -> Result<Option<StoredBlock>> {
        let Some(entry) = self.ledger.get_block(number).map_err(store_error)? else {
            return Ok(None);
        };
        let mut statuses = Vec::with_capacity(entry.txs.len());
        for (i, tx) in entry.txs.into_iter().enumerate() {
            let status = tx.status.ok_or_else(|| Error::StoreCorrupt {
                path: format!("block {number}"),
                offset: 0,
                detail: format!("tx {i} has no status"),
            })?;
            statuses.push((tx.id, status));
        }
        Ok(Some(StoredBlock {
            number,
            block: entry.block,
            statuses,
        }))
    }
}

/// The append-only block store (single writer). See the module docs for the crash
/// behavior.
#[derive(Debug)]
pub struct BlockStore {
    ledger: Ledger,
    reader: StoreReader,
}

impl BlockStore {
    /// Opens (or creates) the store in `dir` with the default configuration.
    pub fn open(dir: impl AsRef<Path>) -> Result<BlockStore> {
        BlockStore::open_with(dir, StoreConfig::default())
    }

    /// Opens (or creates) the store in `dir`: checks the records, cuts off a torn tail,
    /// reads the indexes. Fails on corruption, on a first block other than the
    /// configured one, and if another writer holds the store.
    pub fn open_with(dir: impl AsRef<Path>, config: StoreConfig) -> Result<BlockStore> {
        let segment_bytes = NonZeroU64::new(config.segment_bytes).ok_or_else(|| Error::Config {
            detail: "block store segment_bytes must not be 0".into(),
        })?;
        let ledger = Ledger::open(
            dir,
            LedgerConfig {
                first_block: config.first_block,
                segment_bytes,
                tx_table_memory_bytes: config.tx_index_memory_bytes,
                ..LedgerConfig::default()
            },
        )
        .map_err(store_error)?;
        let reader = StoreReader {
            ledger: ledger.reader(),
        };
        Ok(BlockStore { ledger, reader })
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
        let txs: Vec<LedgerTxRef<'_>> = statuses
            .iter()
            .map(|(id, status)| LedgerTxRef {
                id: &id.0,
                status: Some(*status),
            })
            .collect();
        self.ledger
            .append_borrowed(number, block, &txs)
            .map_err(store_error)
    }
}
