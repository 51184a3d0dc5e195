//! `txs.idx`: an on-disk open-addressing hash table of tx-id fingerprints.
//!
//! A slot is 32 bytes: `fingerprint: u64 ‖ number: u64 ‖ tx_index: u32 ‖ tx_offset: u32
//! ‖ crc32c(previous 24 bytes): u32 ‖ 0: u32`; all zeros is empty. The table has a
//! power-of-two number of slots and probes linearly from `fingerprint mod capacity`. A
//! fingerprint is only a hint: every hit is verified against the tx id stored in the
//! block (the caller's `verify`), so collisions and torn slots (CRC mismatch: skipped)
//! cost a probe, never a wrong answer. The table is grown (rebuilt from its own slots
//! into a file twice as large, then renamed over) beyond 70 % load.
//!
//! # In memory while it fits
//! While the file is at most the configured memory budget, the table keeps an image of
//! it in memory ([`Mirror`]): probes and inserts touch only memory, and the slots
//! changed since the last [`TxTable::flush`] are written to the file there (whole dirty
//! pages, coalesced into runs). The ledger flushes at each checkpoint, before the
//! watermark moves, so the file still holds every slot of the blocks below the
//! watermark; slots of later blocks may be missing from it after a crash, and those
//! blocks are indexed again on open, as before. A table larger than the budget is
//! probed and written in the file, slot by slot (`read_at`/`write_at`): memory stays
//! bounded by the budget whatever the number of txs.

use journal::le::{u32_le, u64_le};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use crate::files::{CRC32C, io_err, sync_dir};
use crate::{Error, Result};

/// Bytes of one slot.
pub(crate) const SLOT: u64 = 32;
/// Slots read per system call while probing the file (512 bytes).
const PROBE_WINDOW: u64 = 16;
/// Slots of a new table.
pub(crate) const INITIAL_SLOTS: u64 = 1024;
/// Bytes of one dirty-tracking page of the in-memory image (128 slots).
const PAGE: u64 = 4096;

/// One occupied slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub fingerprint: u64,
    pub number: u64,
    pub tx_index: u32,
    /// Offset of the tx's `code ‖ id_len ‖ id` in the block's payload.
    pub tx_offset: u32,
}

impl Slot {
    fn encode(&self) -> [u8; SLOT as usize] {
        let mut s = [0u8; SLOT as usize];
        s[..8].copy_from_slice(&self.fingerprint.to_le_bytes());
        s[8..16].copy_from_slice(&self.number.to_le_bytes());
        s[16..20].copy_from_slice(&self.tx_index.to_le_bytes());
        s[20..24].copy_from_slice(&self.tx_offset.to_le_bytes());
        let crc = CRC32C.checksum(&s[..24]);
        s[24..28].copy_from_slice(&crc.to_le_bytes());
        s
    }
}

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Empty,
    /// Not empty and failing its CRC (torn): skipped.
    Torn,
    Occupied(Slot),
}

/// Whether slot bytes `s` are an empty slot (all zeros).
fn is_empty(s: &[u8]) -> bool {
    s.iter().all(|b| *b == 0)
}

fn decode(s: &[u8]) -> Read {
    if is_empty(s) {
        return Read::Empty;
    }
    let u32_at = |i: usize| u32_le(&s[i..i + 4]);
    let u64_at = |i: usize| u64_le(&s[i..i + 8]);
    if CRC32C.checksum(&s[..24]) != u32_at(24) {
        return Read::Torn;
    }
    Read::Occupied(Slot {
        fingerprint: u64_at(0),
        number: u64_at(8),
        tx_index: u32_at(16),
        tx_offset: u32_at(20),
    })
}

/// The fingerprint of a tx id: a stable 64-bit hash (FNV-1a, then a finalizer), never 0.
pub(crate) fn fingerprint(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h.max(1)
}

/// The result of a probe: the verified find, or where the id could go (`Err(None)`:
/// nowhere, the table is full).
type Probe<T> = std::result::Result<T, Option<u64>>;

/// Scans the slots `window` (slot `start` first) of a probe for `want`: `Some` once the
/// probe is decided (a verified slot, or an empty one ends the chain), `None` to go on.
/// A slot's CRC is checked only when its fingerprint matches: every other occupied
/// slot, torn or not, is skipped either way.
fn scan<T>(
    window: &[u8],
    start: u64,
    want: &[u8; 8],
    verify: &mut impl FnMut(&Slot) -> Result<Option<T>>,
) -> Result<Option<Probe<T>>> {
    for (k, s) in window.chunks_exact(SLOT as usize).enumerate() {
        if s[..8] != *want {
            if is_empty(s) {
                return Ok(Some(Err(Some(start + k as u64))));
            }
            continue;
        }
        if let Read::Occupied(slot) = decode(s)
            && let Some(found) = verify(&slot)?
        {
            return Ok(Some(Ok(found)));
        }
    }
    Ok(None)
}

/// The in-memory image of the table file and the pages changed since the last flush.
#[derive(Debug)]
struct Mirror {
    /// `capacity × 32` bytes: the file's content plus the changes not flushed yet.
    slots: RwLock<Vec<u8>>,
    /// One bit per [`PAGE`] of `slots`: changed since the last flush.
    dirty: Mutex<Vec<u64>>,
}

impl Mirror {
    fn new(slots: Vec<u8>) -> Mirror {
        let pages = (slots.len() as u64).div_ceil(PAGE);
        Mirror {
            slots: RwLock::new(slots),
            dirty: Mutex::new(vec![0; pages.div_ceil(64) as usize]),
        }
    }
}

/// The table file.
#[derive(Debug)]
pub(crate) struct TxTable {
    path: PathBuf,
    file: File,
    capacity: u64,
    /// Most bytes of table kept in memory: a larger table lives in its file only.
    budget: u64,
    /// The in-memory image while the table fits `budget`.
    mem: Option<Mirror>,
}

/// Outcome of a probe for a place to insert.
pub(crate) enum Insert {
    /// A verified slot for this id exists (the first occurrence wins).
    Present,
    /// The slot was written.
    Inserted,
}

impl TxTable {
    /// Opens `path`, creating an empty table if it does not exist; the table is read
    /// into memory if it is at most `budget` bytes.
    pub fn open(path: PathBuf, budget: u64) -> Result<TxTable> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        let len = file.metadata().map_err(io_err(&path))?.len();
        if len == 0 {
            file.set_len(INITIAL_SLOTS * SLOT).map_err(io_err(&path))?;
        } else if len % SLOT != 0 || !(len / SLOT).is_power_of_two() {
            return Err(Error::Corrupt {
                path,
                detail: format!("tx table of {len} bytes is not a power of two of slots"),
            });
        }
        let capacity = file.metadata().map_err(io_err(&path))?.len() / SLOT;
        let mem = if capacity * SLOT <= budget {
            let mut slots = vec![0u8; (capacity * SLOT) as usize];
            file.read_exact_at(&mut slots, 0).map_err(io_err(&path))?;
            Some(Mirror::new(slots))
        } else {
            None
        };
        Ok(TxTable {
            path,
            file,
            capacity,
            budget,
            mem,
        })
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Whether the table is held in memory (it fits the budget).
    #[cfg(test)]
    pub fn in_memory(&self) -> bool {
        self.mem.is_some()
    }

    /// Probes for `fingerprint`; returns the first occupied slot with that fingerprint
    /// for which `verify` gives `Some`, or `Err(empty slot index)` where it could go
    /// (`None` if the table is full).
    fn probe<T>(&self, fingerprint: u64, verify: impl FnMut(&Slot) -> Result<Option<T>>) -> Result<Probe<T>> {
        match &self.mem {
            Some(m) => {
                let slots = m.slots.read().unwrap_or_else(|e| e.into_inner());
                self.probe_slots(&slots, fingerprint, verify)
            }
            None => self.probe_file(fingerprint, verify),
        }
    }

    /// [`TxTable::probe`] over the in-memory image `slots`.
    fn probe_slots<T>(
        &self,
        slots: &[u8],
        fingerprint: u64,
        mut verify: impl FnMut(&Slot) -> Result<Option<T>>,
    ) -> Result<Probe<T>> {
        let mask = self.capacity - 1;
        let want = fingerprint.to_le_bytes();
        let mut i = fingerprint & mask;
        let mut left = self.capacity;
        while left > 0 {
            let n = PROBE_WINDOW.min(self.capacity - i).min(left);
            let window = &slots[(i * SLOT) as usize..][..(n * SLOT) as usize];
            if let Some(done) = scan(window, i, &want, &mut verify)? {
                return Ok(done);
            }
            left -= n;
            i = (i + n) & mask;
        }
        Ok(Err(None))
    }

    /// [`TxTable::probe`] in the file: reads [`PROBE_WINDOW`] consecutive slots per
    /// system call (a probe chain near the 70 % load limit is several slots long).
    fn probe_file<T>(
        &self,
        fingerprint: u64,
        mut verify: impl FnMut(&Slot) -> Result<Option<T>>,
    ) -> Result<Probe<T>> {
        let mask = self.capacity - 1;
        let want = fingerprint.to_le_bytes();
        let mut window = [0u8; (PROBE_WINDOW * SLOT) as usize];
        let mut i = fingerprint & mask;
        let mut left = self.capacity;
        while left > 0 {
            // Up to the window, the end of the file, or the slots left to probe.
            let n = PROBE_WINDOW.min(self.capacity - i).min(left);
            let bytes = &mut window[..(n * SLOT) as usize];
            self.file
                .read_exact_at(bytes, i * SLOT)
                .map_err(io_err(&self.path))?;
            if let Some(done) = scan(bytes, i, &want, &mut verify)? {
                return Ok(done);
            }
            left -= n;
            i = (i + n) & mask;
        }
        Ok(Err(None))
    }

    /// The first slot for `fingerprint` that `verify` accepts.
    pub fn lookup<T>(
        &self,
        fingerprint: u64,
        verify: impl FnMut(&Slot) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        Ok(self.probe(fingerprint, verify)?.ok())
    }

    /// Reads the first slot of each probe for `fingerprints` (a table in memory only),
    /// so that inserting them one after the other finds those slots in the cache: the
    /// reads do not depend on each other, so their cache misses overlap. Changes
    /// nothing.
    pub fn warm(&self, fingerprints: impl Iterator<Item = u64>) {
        let Some(m) = &self.mem else { return };
        let slots = m.slots.read().unwrap_or_else(|e| e.into_inner());
        let mask = self.capacity - 1;
        let mut seen = 0u8;
        for fp in fingerprints {
            if let Some(b) = slots.get(((fp & mask) * SLOT) as usize) {
                seen ^= *b;
            }
        }
        std::hint::black_box(seen);
    }

    /// Inserts `slot` unless `verify` accepts a slot already there. `Ok(None)` if the
    /// table is full (grow it and retry). In memory, the slot reaches the file at the
    /// next [`TxTable::flush`]; otherwise it is written at once (not synced).
    pub fn insert(
        &self,
        slot: Slot,
        verify: impl FnMut(&Slot) -> Result<Option<()>>,
    ) -> Result<Option<Insert>> {
        let Some(m) = &self.mem else {
            return match self.probe_file(slot.fingerprint, verify)? {
                Ok(()) => Ok(Some(Insert::Present)),
                Err(None) => Ok(None),
                Err(Some(i)) => {
                    self.file
                        .write_all_at(&slot.encode(), i * SLOT)
                        .map_err(io_err(&self.path))?;
                    Ok(Some(Insert::Inserted))
                }
            };
        };
        // The only writer: holding the write lock across the probe keeps the image
        // consistent for the readers, who wait at most one insert.
        let mut slots = m.slots.write().unwrap_or_else(|e| e.into_inner());
        match self.probe_slots(&slots, slot.fingerprint, verify)? {
            Ok(()) => Ok(Some(Insert::Present)),
            Err(None) => Ok(None),
            Err(Some(i)) => {
                slots[(i * SLOT) as usize..][..SLOT as usize].copy_from_slice(&slot.encode());
                let page = i * SLOT / PAGE;
                let mut dirty = m.dirty.lock().unwrap_or_else(|e| e.into_inner());
                dirty[(page / 64) as usize] |= 1 << (page % 64);
                Ok(Some(Insert::Inserted))
            }
        }
    }

    /// Writes the slots changed in memory since the last flush to the file (runs of
    /// whole dirty pages, one system call each), without syncing. A table that lives
    /// in its file has nothing to flush.
    pub fn flush(&self) -> Result<()> {
        let Some(m) = &self.mem else { return Ok(()) };
        let mut dirty = m.dirty.lock().unwrap_or_else(|e| e.into_inner());
        let slots = m.slots.read().unwrap_or_else(|e| e.into_inner());
        let pages = (slots.len() as u64).div_ceil(PAGE);
        let is_dirty = |p: u64| dirty[(p / 64) as usize] & (1 << (p % 64)) != 0;
        let mut p = 0;
        while p < pages {
            if !is_dirty(p) {
                p += 1;
                continue;
            }
            let start = p;
            while p < pages && is_dirty(p) {
                p += 1;
            }
            let from = start * PAGE;
            let to = (p * PAGE).min(slots.len() as u64);
            self.file
                .write_all_at(&slots[from as usize..to as usize], from)
                .map_err(io_err(&self.path))?;
        }
        dirty.iter_mut().for_each(|w| *w = 0);
        Ok(())
    }

    /// The bytes of the whole table: the image, or the file.
    #[cfg(test)]
    fn all_slots(&self) -> Result<Vec<u8>> {
        if let Some(m) = &self.mem {
            return Ok(m.slots.read().unwrap_or_else(|e| e.into_inner()).clone());
        }
        let mut old = vec![0u8; (self.capacity * SLOT) as usize];
        self.file.read_exact_at(&mut old, 0).map_err(io_err(&self.path))?;
        Ok(old)
    }

    /// A table of `capacity` slots holding the checked slots of `old` for blocks below
    /// `below`, and their number.
    fn rehash(old: &[u8], capacity: u64, below: u64) -> (Vec<u8>, u64) {
        let mut new = vec![0u8; (capacity * SLOT) as usize];
        let mask = capacity - 1;
        let mut count = 0;
        for s in old.chunks(SLOT as usize) {
            let Read::Occupied(slot) = decode(s) else { continue };
            if slot.number >= below {
                continue;
            }
            let mut i = slot.fingerprint & mask;
            while new[(i * SLOT) as usize..][..SLOT as usize]
                .iter()
                .any(|b| *b != 0)
            {
                i = (i + 1) & mask;
            }
            // The slot's checked bytes as they are (its CRC is still right); the
            // padding stays zero.
            new[(i * SLOT) as usize..][..28].copy_from_slice(&s[..28]);
            count += 1;
        }
        (new, count)
    }

    /// A table with `capacity` slots holding this one's slots of blocks below `below`
    /// (torn slots dropped), renamed over this one's file; returns it with its number
    /// of occupied slots. Used to grow the table and to drop the slots of blocks the
    /// journal lost (clearing them in place would break probe chains). The new file is
    /// complete (nothing left to flush); it is kept in memory if it fits the budget.
    /// An in-memory table is rehashed from its image in place (no copy of it).
    pub fn rebuild(&self, capacity: u64, below: u64, sync: bool) -> Result<(TxTable, u64)> {
        let (new, count) = match &self.mem {
            Some(m) => {
                let slots = m.slots.read().unwrap_or_else(|e| e.into_inner());
                Self::rehash(&slots, capacity, below)
            }
            None => {
                let mut old = vec![0u8; (self.capacity * SLOT) as usize];
                self.file.read_exact_at(&mut old, 0).map_err(io_err(&self.path))?;
                Self::rehash(&old, capacity, below)
            }
        };
        let tmp = self.path.with_extension("idx.tmp");
        let write = || -> std::io::Result<File> {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all_at(&new, 0)?;
            if sync {
                f.sync_all()?;
            }
            std::fs::rename(&tmp, &self.path)?;
            Ok(f)
        };
        let file = write().map_err(io_err(&self.path))?;
        if sync {
            sync_dir(self.path.parent().unwrap_or(Path::new(".")))?;
        }
        let mem = (capacity * SLOT <= self.budget).then(|| Mirror::new(new));
        let table = TxTable {
            path: self.path.clone(),
            file,
            capacity,
            budget: self.budget,
            mem,
        };
        Ok((table, count))
    }

    /// Syncs the file (call [`TxTable::flush`] first).
    pub fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(io_err(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two modes: in the file only, and in memory.
    const BUDGETS: [u64; 2] = [0, u64::MAX];

    fn open(dir: &tempfile::TempDir, budget: u64) -> TxTable {
        let t = TxTable::open(dir.path().join("txs.idx"), budget).unwrap();
        assert_eq!(t.in_memory(), budget > 0);
        t
    }

    fn is(n: u64) -> impl FnMut(&Slot) -> Result<Option<()>> {
        move |s: &Slot| Ok((s.number == n).then_some(()))
    }

    #[test]
    fn insert_lookup_collide_grow_purge() {
        for budget in BUDGETS {
            let dir = tempfile::tempdir().unwrap();
            let t = open(&dir, budget);
            assert_eq!(t.capacity(), INITIAL_SLOTS);
            // Two slots with one fingerprint: the verifier tells them apart.
            let a = Slot {
                fingerprint: 5,
                number: 1,
                tx_index: 0,
                tx_offset: 12,
            };
            let b = Slot { number: 2, ..a };
            assert!(matches!(t.insert(a, is(1)).unwrap(), Some(Insert::Inserted)));
            assert!(matches!(t.insert(a, is(1)).unwrap(), Some(Insert::Present)));
            assert!(matches!(t.insert(b, is(2)).unwrap(), Some(Insert::Inserted)));
            assert_eq!(
                t.lookup(5, |s| Ok((s.number == 2).then_some(s.number))).unwrap(),
                Some(2)
            );
            assert_eq!(t.lookup(6, |s| Ok(Some(s.number))).unwrap(), None);
            let (g, count) = t.rebuild(4096, u64::MAX, false).unwrap();
            assert_eq!((g.capacity(), count, g.in_memory()), (4096, 2, budget > 0));
            assert_eq!(
                g.lookup(5, |s| Ok((s.number == 2).then_some(s.number))).unwrap(),
                Some(2)
            );
            let (p, count) = g.rebuild(4096, 2, false).unwrap();
            assert_eq!(count, 1);
            assert_eq!(p.lookup(5, |s| Ok(Some(s.number))).unwrap(), Some(1));
        }
        assert_eq!(fingerprint("x"), fingerprint("x"));
        assert_ne!(fingerprint("x"), fingerprint("y"));
    }

    #[test]
    fn a_torn_slot_is_skipped_not_an_end_of_chain() {
        for budget in BUDGETS {
            let dir = tempfile::tempdir().unwrap();
            let t = open(&dir, budget);
            let slot = |number| Slot {
                fingerprint: 7,
                number,
                tx_index: 0,
                tx_offset: 12,
            };
            t.insert(slot(1), is(1)).unwrap();
            t.insert(slot(2), is(2)).unwrap();
            t.flush().unwrap();
            // The first slot of the chain is torn (a power loss in the middle of its
            // write), as the next open finds it.
            t.file.write_all_at(&[0xff; 8], 7 * SLOT + 8).unwrap();
            let t = open(&dir, budget);
            assert_eq!(t.lookup(7, |s| Ok(Some(s.number))).unwrap(), Some(2));
            assert_eq!(t.lookup(7, |s| Ok((s.number == 1).then_some(1))).unwrap(), None);
            // Indexing block 1 again puts its slot after the chain; growing drops the
            // torn one.
            assert!(matches!(
                t.insert(slot(1), is(1)).unwrap(),
                Some(Insert::Inserted)
            ));
            let (g, count) = t.rebuild(INITIAL_SLOTS, u64::MAX, false).unwrap();
            assert_eq!(count, 2);
            assert_eq!(
                g.lookup(7, |s| Ok((s.number == 1).then_some(1))).unwrap(),
                Some(1)
            );
        }
    }

    /// Chains that run past the end of the file wrap to slot 0, across probe windows;
    /// a full table answers "full" after every slot, once.
    #[test]
    fn chains_wrap_around_the_end_and_a_full_table_says_so() {
        for budget in BUDGETS {
            let dir = tempfile::tempdir().unwrap();
            let t = open(&dir, budget);
            let last = INITIAL_SLOTS - 1;
            let slot = |fingerprint, number| Slot {
                fingerprint,
                number,
                tx_index: 0,
                tx_offset: 12,
            };
            // 40 slots from the last one: 1 at its home, 39 wrapped (more than two
            // windows).
            for n in 0..40 {
                assert!(matches!(
                    t.insert(slot(last, n), is(n)).unwrap(),
                    Some(Insert::Inserted)
                ));
            }
            for n in 0..40 {
                assert_eq!(
                    t.lookup(last, |s| Ok((s.number == n).then_some(s.number)))
                        .unwrap(),
                    Some(n)
                );
            }
            // Slot 38 (the 40th) is where the chain ends; 39 is empty.
            assert_eq!(t.probe(last, |_| Ok(None::<()>)).unwrap(), Err(Some(39)));
            // Another fingerprint whose home is inside the wrapped part starts there.
            assert_eq!(t.lookup(3, |s| Ok(Some(s.number))).unwrap(), None);
            // Fill every slot: a miss probes all of them and says "full".
            for n in 40..INITIAL_SLOTS {
                assert!(matches!(
                    t.insert(slot(n, 1000 + n), is(1000 + n)).unwrap(),
                    Some(Insert::Inserted)
                ));
            }
            assert_eq!(t.probe(12_345, |_| Ok(None::<()>)).unwrap(), Err(None));
            assert!(t.insert(slot(1, 99_999), is(99_999)).unwrap().is_none());
            assert_eq!(
                t.lookup(last, |s| Ok((s.number == 39).then_some(s.number)))
                    .unwrap(),
                Some(39)
            );
        }
    }

    /// In memory, inserts reach the file only at a flush, and a flush writes every
    /// changed slot: the file then equals the image, byte for byte. Without a flush
    /// (a crash), reopening finds the file as it was at the last flush.
    /// Warming reads only: the slots, the file and every lookup stay as they were, for
    /// any fingerprints, in memory and in the file.
    #[test]
    fn warming_changes_nothing() {
        for budget in [u64::MAX, 0] {
            let dir = tempfile::tempdir().unwrap();
            let t = open(&dir, budget);
            assert_eq!(t.in_memory(), budget > 0);
            let fps = [1, 2, 129, INITIAL_SLOTS - 1, INITIAL_SLOTS, u64::MAX];
            for fp in fps {
                let slot = Slot {
                    fingerprint: fp,
                    number: fp,
                    tx_index: 0,
                    tx_offset: 0,
                };
                t.insert(slot, is(fp)).unwrap();
            }
            let before = t.all_slots().unwrap();
            t.warm(fps.into_iter().chain([0, 7, u64::MAX - 1, 1 << 63]));
            assert_eq!(t.all_slots().unwrap(), before);
            for fp in fps {
                assert_eq!(t.lookup(fp, |s| Ok(Some(s.number))).unwrap(), Some(fp));
            }
        }
    }

    #[test]
    fn in_memory_inserts_reach_the_file_at_the_flush() {
        let dir = tempfile::tempdir().unwrap();
        let file = |dir: &tempfile::TempDir| std::fs::read(dir.path().join("txs.idx")).unwrap();
        let t = open(&dir, u64::MAX);
        let slot = |fingerprint: u64| Slot {
            fingerprint,
            number: fingerprint,
            tx_index: 1,
            tx_offset: 12,
        };
        // Slots in pages 0, 3 and the last one (a run of one page each), and 4 and 5
        // (one run of two pages).
        let fps = [1, 3 * 128 + 5, 4 * 128, 5 * 128 + 127, INITIAL_SLOTS - 1];
        for fp in fps {
            t.insert(slot(fp), is(fp)).unwrap();
        }
        assert!(
            file(&dir).iter().all(|b| *b == 0),
            "nothing written before the flush"
        );
        t.flush().unwrap();
        let image = t.all_slots().unwrap();
        assert_eq!(file(&dir), image);
        // A later insert, then a crash before the flush: the reopened table lacks it.
        t.insert(slot(77), is(77)).unwrap();
        drop(t);
        let t = open(&dir, u64::MAX);
        assert_eq!(t.all_slots().unwrap(), image);
        assert_eq!(t.lookup(77, |s| Ok(Some(s.number))).unwrap(), None);
        for fp in fps {
            assert_eq!(t.lookup(fp, |s| Ok(Some(s.number))).unwrap(), Some(fp));
        }
        // The same table opened within a smaller budget lives in its file and finds
        // the same slots.
        let f = TxTable::open(dir.path().join("txs.idx"), INITIAL_SLOTS * SLOT - 1).unwrap();
        assert!(!f.in_memory());
        for fp in fps {
            assert_eq!(f.lookup(fp, |s| Ok(Some(s.number))).unwrap(), Some(fp));
        }
    }

    /// A table that grows past the budget leaves memory and keeps every slot; one that
    /// fits stays in memory.
    #[test]
    fn growing_past_the_budget_moves_the_table_to_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let t = open(&dir, 2 * INITIAL_SLOTS * SLOT);
        for n in 1..=100 {
            t.insert(
                Slot {
                    fingerprint: n * 7919,
                    number: n,
                    tx_index: 0,
                    tx_offset: 12,
                },
                is(n),
            )
            .unwrap();
        }
        let (g, count) = t.rebuild(2 * INITIAL_SLOTS, u64::MAX, false).unwrap();
        assert_eq!((count, g.in_memory()), (100, true));
        let (h, count) = g.rebuild(4 * INITIAL_SLOTS, u64::MAX, false).unwrap();
        assert_eq!((count, h.in_memory()), (100, false));
        for n in 1..=100 {
            assert_eq!(
                h.lookup(n * 7919, |s| Ok((s.number == n).then_some(n))).unwrap(),
                Some(n)
            );
        }
    }
}
