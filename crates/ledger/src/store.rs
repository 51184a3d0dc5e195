//! The writer and its readers.

use journal::le::u32_le;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use journal::{Durability, Journal, JournalReader, Position};
use types::{Height, TxId};

use crate::entry;
use crate::files::{Meta, NumIndex};
use crate::txtable::{self, Insert, Slot, TxTable};
use crate::{BlockEntry, Error, LedgerConfig, LedgerTx, LedgerTxRef, Result, TxLocation};

/// What readers see: the visible block range and the current tx table.
#[derive(Debug, Clone)]
struct View {
    first: u64,
    /// Blocks below this are in both indexes.
    next: u64,
    table: Arc<TxTable>,
}

/// What the writer and its readers share.
#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    /// Block number of entry 0 of `blocks.idx`.
    base: u64,
    blocks: NumIndex,
    view: RwLock<View>,
}

/// Read access to a [`Ledger`]; cheap to clone, shareable across threads.
#[derive(Debug, Clone)]
pub struct LedgerReader {
    journal: JournalReader,
    shared: Arc<Shared>,
}

impl LedgerReader {
    fn view(&self) -> View {
        self.shared.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The first block this store holds (or will hold).
    pub fn first_block(&self) -> u64 {
        self.view().first
    }

    /// The number of the next block to append.
    pub fn next_block(&self) -> u64 {
        self.view().next
    }

    fn corrupt(&self, detail: String) -> Error {
        Error::Corrupt {
            path: self.shared.dir.clone(),
            detail,
        }
    }

    /// Block `number`; `None` if it is not (yet) in this store. The record is read from
    /// disk and its CRC checked again.
    pub fn get_block(&self, number: u64) -> Result<Option<BlockEntry>> {
        let view = self.view();
        if number < view.first || number >= view.next {
            return Ok(None);
        }
        let pos = self.shared.blocks.read(number - self.shared.base)?;
        let payload = self.journal.read(pos)?;
        let decoded = entry::decode(&payload).map_err(|d| self.corrupt(format!("block {number}: {d}")))?;
        if decoded.number != number {
            let detail = format!(
                "index points block {number} at the record of block {}",
                decoded.number
            );
            return Err(self.corrupt(detail));
        }
        Ok(Some(decoded.into_entry(payload)))
    }

    /// Where the first indexed occurrence of `id` is, with its stored status. Reads a
    /// few index slots and, for a fingerprint hit, the id stored in the block.
    pub fn tx(&self, id: &TxId) -> Result<Option<TxLocation>> {
        let view = self.view();
        view.table.lookup(txtable::fingerprint(&id.0), |slot| {
            self.verify(slot, &id.0, view.first, view.next)
        })
    }

    /// `Some` if `slot` is `id` in a block of `[first, below)`.
    fn verify(&self, slot: &Slot, id: &str, first: u64, below: u64) -> Result<Option<TxLocation>> {
        if slot.number < first || slot.number >= below {
            return Ok(None);
        }
        let pos = self.shared.blocks.read(slot.number - self.shared.base)?;
        let want = 8 + id.len() as u64;
        if u64::from(slot.tx_offset) + want > u64::from(pos.len) {
            return Ok(None);
        }
        let bytes = self.journal.read_unchecked(pos, slot.tx_offset, want as u32)?;
        let u32_at = |i: usize| u32_le(&bytes[i..i + 4]);
        if u32_at(4) as usize != id.len() || &bytes[8..] != id.as_bytes() {
            return Ok(None);
        }
        let status =
            entry::status_of(u32_at(0)).map_err(|d| self.corrupt(format!("block {}: {d}", slot.number)))?;
        Ok(Some(TxLocation {
            height: Height::new(slot.number, slot.tx_index),
            status,
        }))
    }
}

/// The block store (single writer). See the crate docs for the layout and the crash
/// behaviour.
#[derive(Debug)]
pub struct Ledger {
    journal: Journal,
    reader: LedgerReader,
    config: LedgerConfig,
    /// Occupied slots of the tx table (for its load factor).
    tx_count: u64,
    since_checkpoint: u32,
    reindexed_on_open: u64,
    poisoned: bool,
    /// Cleared by tests that simulate a crash.
    checkpoint_on_drop: bool,
}

/// The index state found on disk, made consistent with the journal.
struct Indexes {
    meta: Meta,
    blocks: NumIndex,
    table: TxTable,
}

/// Opens the index files of `dir` for a journal holding `[first, next)`.
fn open_indexes(dir: &Path, first: u64, next: u64, config: &LedgerConfig) -> Result<Indexes> {
    let sync = config.durability != Durability::NoSync;
    let fresh = Meta {
        base: first,
        watermark: first,
        tx_count: 0,
    };
    let meta = match Meta::load(dir) {
        Ok(Some(m)) if m.base <= first => Some(m),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "ledger index meta unusable; indexing every block again");
            None
        }
    };
    if meta.is_none() {
        for name in ["blocks.idx", "txs.idx"] {
            match std::fs::remove_file(dir.join(name)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(crate::files::io_err(&dir.join(name))(e));
                }
                _ => {}
            }
        }
    }
    let mut meta = meta.unwrap_or(fresh);
    let blocks = NumIndex::open(dir.join("blocks.idx"))?;
    let mut table = TxTable::open(dir.join("txs.idx"), config.tx_table_memory_bytes)?;
    meta.watermark = meta.watermark.max(first);
    if meta.watermark > next || blocks.len()? > next - meta.base {
        tracing::warn!(
            dir = %dir.display(),
            next,
            watermark = meta.watermark,
            "the ledger's journal holds fewer blocks than its indexes; dropping the stale entries"
        );
        let (rebuilt, count) = table.rebuild(table.capacity(), next, sync)?;
        table = rebuilt;
        meta.tx_count = count;
        meta.watermark = meta.watermark.min(next);
    }
    blocks.truncate(next - meta.base)?;
    Ok(Indexes { meta, blocks, table })
}

impl Ledger {
    /// Opens (or creates) the ledger in `dir`: the journal checks its records and cuts a
    /// torn tail; the indexes are read, and only the blocks past their durable
    /// watermark are indexed again. Fails on corruption, on a first block other than
    /// the configured one, and if another writer holds the directory.
    pub fn open(dir: impl AsRef<Path>, config: LedgerConfig) -> Result<Ledger> {
        let dir = dir.as_ref().to_path_buf();
        let journal = Journal::open(
            &dir,
            journal::Config {
                segment_bytes: config.segment_bytes,
                max_record_bytes: config.max_record_bytes,
                durability: config.durability,
                first_seq: config.first_block.unwrap_or(0),
                extension: "blocks",
            },
        )?;
        let (first, next) = (journal.first_seq(), journal.next_seq());
        if let Some(configured) = config.first_block
            && configured != first
        {
            return Err(Error::FirstBlockMismatch {
                stored: first,
                configured,
            });
        }
        let Indexes { meta, blocks, table } = open_indexes(&dir, first, next, &config)?;
        let reader = LedgerReader {
            journal: journal.reader(),
            shared: Arc::new(Shared {
                dir,
                base: meta.base,
                blocks,
                view: RwLock::new(View {
                    first,
                    next: meta.watermark,
                    table: Arc::new(table),
                }),
            }),
        };
        let mut ledger = Ledger {
            journal,
            reader,
            config,
            tx_count: meta.tx_count,
            since_checkpoint: 0,
            reindexed_on_open: 0,
            poisoned: false,
            checkpoint_on_drop: true,
        };
        ledger.reindexed_on_open = ledger.reindex(meta.watermark, next)?;
        if ledger.reindexed_on_open > 0 || Meta::load(&ledger.reader.shared.dir).ok().flatten() != Some(meta)
        {
            ledger.checkpoint()?;
        }
        Ok(ledger)
    }

    /// Indexes the journal's records `[from, to)`; returns how many.
    fn reindex(&mut self, from: u64, to: u64) -> Result<u64> {
        let mut count = 0;
        for record in self.journal.reader().replay(from) {
            let record = record?;
            if record.seq >= to {
                break;
            }
            let decoded = entry::decode(&record.payload)
                .map_err(|d| self.reader.corrupt(format!("record {}: {d}", record.seq)))?;
            if decoded.number != record.seq {
                let detail = format!("record {} holds block {}", record.seq, decoded.number);
                return Err(self.reader.corrupt(detail));
            }
            let at = decoded.txs.iter().map(|t| (t.tx.borrowed(), t.offset));
            self.index_block(record.seq, record.position, at)?;
            count += 1;
        }
        Ok(count)
    }

    /// A read handle sharing this ledger's indexes.
    pub fn reader(&self) -> LedgerReader {
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

    /// How many blocks [`Ledger::open`] indexed again (those past the durable
    /// watermark of the indexes): 0 after a clean shutdown.
    pub fn reindexed_on_open(&self) -> u64 {
        self.reindexed_on_open
    }

    /// See [`LedgerReader::get_block`].
    pub fn get_block(&self, number: u64) -> Result<Option<BlockEntry>> {
        self.reader.get_block(number)
    }

    /// See [`LedgerReader::tx`].
    pub fn tx(&self, id: &TxId) -> Result<Option<TxLocation>> {
        self.reader.tx(id)
    }

    /// Appends block `number` (which must be [`Ledger::next_block`]) with its txs in tx
    /// order, and returns once the record is durable (per the configured durability)
    /// and indexed. After an I/O failure the ledger refuses further appends
    /// ([`Error::Poisoned`]); reopen it.
    pub fn append(&mut self, number: u64, block: &[u8], txs: &[LedgerTx]) -> Result<()> {
        let txs: Vec<LedgerTxRef<'_>> = txs.iter().map(LedgerTx::borrowed).collect();
        self.append_borrowed(number, block, &txs)
    }

    /// [`Ledger::append`] with borrowed txs: the same record, the same index entries.
    pub fn append_borrowed(&mut self, number: u64, block: &[u8], txs: &[LedgerTxRef<'_>]) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        let expected = self.next_block();
        if number != expected {
            return Err(Error::OutOfOrder {
                expected,
                got: number,
            });
        }
        let (payload, offsets) = entry::encode_refs(number, block, txs);
        if payload.len() > self.config.max_record_bytes.get() as usize {
            return Err(Error::BlockTooLarge {
                number,
                bytes: payload.len(),
            });
        }
        let appended = self
            .journal
            .append(&payload)
            .inspect_err(|_| self.poisoned = true)?;
        let at = txs.iter().copied().zip(offsets);
        self.index_block(number, appended.position, at)
            .inspect_err(|_| self.poisoned = true)?;
        self.since_checkpoint += 1;
        if self.since_checkpoint >= self.config.checkpoint_every.get() {
            self.checkpoint().inspect_err(|_| self.poisoned = true)?;
        }
        Ok(())
    }

    /// Syncs the index files and advances their durable watermark to the next block.
    pub fn checkpoint(&mut self) -> Result<()> {
        let shared = &self.reader.shared;
        let view = self.reader.view();
        let sync = self.config.durability != Durability::NoSync;
        // The slots changed in memory reach the file before the watermark moves past
        // their blocks.
        view.table.flush()?;
        if sync {
            shared.blocks.sync()?;
            view.table.sync()?;
        }
        let meta = Meta {
            base: shared.base,
            watermark: view.next,
            tx_count: self.tx_count,
        };
        meta.store(&shared.dir, sync)?;
        self.since_checkpoint = 0;
        Ok(())
    }

    /// Writes the index entries of block `number` (its txs with their offsets in the
    /// record) and makes it visible.
    fn index_block<'a>(
        &mut self,
        number: u64,
        pos: Position,
        txs: impl Iterator<Item = (LedgerTxRef<'a>, u32)>,
    ) -> Result<()> {
        let shared = self.reader.shared.clone();
        shared.blocks.write(number - shared.base, pos)?;
        let stored: Vec<(u32, LedgerTxRef<'a>, u32, u64)> = txs
            .enumerate()
            .filter(|(_, (t, _))| t.status.is_none_or(|s| s.is_stored()))
            .map(|(i, (t, offset))| (i as u32, t, offset, txtable::fingerprint(t.id)))
            .collect();
        // The first slot of every probe is read before any insert: the reads are
        // independent, so their cache misses overlap, and the inserts find them cached.
        self.reader.view().table.warm(stored.iter().map(|s| s.3));
        for (i, t, offset, fingerprint) in stored {
            self.insert_tx(number, i, t.id, offset, fingerprint)?;
        }
        shared.view.write().unwrap_or_else(|e| e.into_inner()).next = number + 1;
        Ok(())
    }

    /// Indexes tx `index` of block `number` (id `id` at `offset` in the record) unless
    /// its id is indexed already.
    /// `fingerprint` is `txtable::fingerprint(id)`.
    fn insert_tx(&mut self, number: u64, index: u32, id: &str, offset: u32, fingerprint: u64) -> Result<()> {
        let slot = Slot {
            fingerprint,
            number,
            tx_index: index,
            tx_offset: offset,
        };
        loop {
            let view = self.reader.view();
            if (self.tx_count + 1) * 10 > view.table.capacity() * 7 {
                self.grow(&view.table)?;
                continue;
            }
            // A slot for this very tx (written before a crash, found while indexing
            // again) counts as occupied, like a new one; an earlier occurrence wins.
            let this = Height::new(number, index);
            let same = std::cell::Cell::new(false);
            let verify = |s: &Slot| {
                let found = self.reader.verify(s, id, view.first, number + 1)?;
                same.set(found.is_some_and(|loc| loc.height == this));
                Ok(found.map(|_| ()))
            };
            match view.table.insert(slot, verify)? {
                Some(Insert::Inserted) => {
                    self.tx_count += 1;
                    return Ok(());
                }
                Some(Insert::Present) => {
                    self.tx_count += u64::from(same.get());
                    return Ok(());
                }
                None => self.grow(&view.table)?,
            }
        }
    }

    /// Rebuilds the tx table larger: fourfold while the result still fits the memory
    /// budget, else twofold. Each rebuild rehashes every slot and writes (and syncs) the
    /// whole file, so a fresh store's table, which grows from 1,024 slots, is rebuilt
    /// half as often (it grows to 262,144 slots in 4 rebuilds instead of 8); a table
    /// that would leave memory by growing fourfold grows twofold, so it leaves memory no
    /// earlier than before.
    fn grow(&mut self, table: &TxTable) -> Result<()> {
        let sync = self.config.durability != Durability::NoSync;
        let capacity = table.capacity();
        let fourfold = capacity.saturating_mul(4);
        let factor = if fourfold.saturating_mul(txtable::SLOT) <= self.config.tx_table_memory_bytes {
            4
        } else {
            2
        };
        let (grown, count) = table.rebuild(capacity.saturating_mul(factor), u64::MAX, sync)?;
        self.tx_count = count;
        let mut view = self.reader.shared.view.write().unwrap_or_else(|e| e.into_inner());
        view.table = Arc::new(grown);
        Ok(())
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if self.checkpoint_on_drop
            && !self.poisoned
            && self.since_checkpoint > 0
            && let Err(e) = self.checkpoint()
        {
            tracing::warn!(error = %e, "ledger index checkpoint on close failed; the next open re-indexes");
        }
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
