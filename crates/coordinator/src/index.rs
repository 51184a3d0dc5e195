//! The global key index: for every key touched by an unfinished tx, the last writer and
//! the readers since that write.
//!
//! A new tx depends on the last writer of each key it touches, and, for each key it
//! writes, on the readers since the last write. Older txs on the key need no edge: the
//! last writer already waits for them, so the dependency holds transitively. This keeps
//! the number of edges proportional to the number of keys, not to the number of txs
//! sharing a key.

use crate::key::FpMap;
use std::collections::hash_map::Entry;

/// Marks "no tx" in a sequence-number slot.
pub(crate) const NO_TX: u64 = u64::MAX;

/// The epoch recorded in a [`KeyRef`] of a writer.
const WRITER: u64 = u64::MAX;

/// Readers lists are compacted (finished readers dropped) once they hold this many
/// entries more than twice the live ones.
const COMPACT_SLACK: usize = 32;

/// Unused keys stay mapped until they outnumber the used ones by this many; then they
/// are all unmapped at once (amortised O(1) per release).
pub(crate) const PURGE_SLACK: usize = 1024;

/// One key's state.
#[derive(Debug)]
pub(crate) struct KeyEntry {
    fp: u64,
    /// Sequence number of the last writer (always unfinished), or [`NO_TX`].
    pub(crate) last_writer: u64,
    /// Readers since the last write; may still list readers that finished (dropped
    /// lazily).
    pub(crate) readers: Vec<u64>,
    /// Unfinished txs in `readers`.
    live_readers: u32,
    /// Changes (to a value never used before) whenever `readers` is restarted, so a
    /// finishing reader can tell whether it is still counted in `live_readers`.
    epoch: u64,
    /// No unfinished tx is left on the key, which is still mapped (see [`KeyIndex`]).
    unused: bool,
}

/// What a tx remembers about a key the index points at it for, to clean up when it
/// finishes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyRef {
    entry: u32,
    /// The entry's epoch when the tx joined its readers, or [`WRITER`].
    epoch: u64,
}

/// Key fingerprint → [`KeyEntry`], with entries recycled through a free list.
///
/// A key whose last unfinished tx finishes is not unmapped at once: its entry is marked
/// unused and revived (under a new epoch, as a new entry would be) if a later tx touches
/// the key, which saves a map probe per key of every finished tx. Unused entries are
/// unmapped together once they are more than the used ones plus [`PURGE_SLACK`], so the
/// map holds at most about twice the keys in use.
#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    map: FpMap<u32>,
    entries: Vec<KeyEntry>,
    free: Vec<u32>,
    next_epoch: u64,
    /// Mapped entries marked unused.
    unused: usize,
}

impl KeyIndex {
    /// Number of keys with an unfinished tx.
    pub(crate) fn len(&self) -> usize {
        self.map.len() - self.unused
    }

    /// Number of mapped keys, unused ones included.
    #[cfg(test)]
    pub(crate) fn mapped(&self) -> usize {
        self.map.len()
    }

    fn new_epoch(&mut self) -> u64 {
        self.next_epoch += 1;
        self.next_epoch
    }

    /// The entry of key `fp`, created empty if the key is not indexed.
    pub(crate) fn resolve(&mut self, fp: u64) -> u32 {
        let slot = match self.map.entry(fp) {
            Entry::Occupied(o) => {
                let idx = *o.get();
                let e = &mut self.entries[idx as usize];
                if e.unused {
                    e.unused = false;
                    self.unused -= 1;
                    self.next_epoch += 1;
                    e.epoch = self.next_epoch;
                }
                return idx;
            }
            Entry::Vacant(v) => v,
        };
        self.next_epoch += 1;
        let epoch = self.next_epoch;
        let idx = match self.free.pop() {
            Some(idx) => {
                let e = &mut self.entries[idx as usize];
                e.fp = fp;
                e.epoch = epoch;
                idx
            }
            None => {
                self.entries.push(KeyEntry {
                    fp,
                    last_writer: NO_TX,
                    readers: Vec::new(),
                    live_readers: 0,
                    epoch,
                    unused: false,
                });
                (self.entries.len() - 1) as u32
            }
        };
        slot.insert(idx);
        idx
    }

    /// The entry at `idx`.
    #[inline]
    pub(crate) fn entry(&self, idx: u32) -> &KeyEntry {
        &self.entries[idx as usize]
    }

    /// Makes `seq` the last writer of the key; the readers list restarts.
    pub(crate) fn set_writer(&mut self, idx: u32, seq: u64) -> KeyRef {
        let epoch = self.new_epoch();
        let e = &mut self.entries[idx as usize];
        e.last_writer = seq;
        e.readers.clear();
        e.live_readers = 0;
        e.epoch = epoch;
        KeyRef {
            entry: idx,
            epoch: WRITER,
        }
    }

    /// Adds `seq` to the readers of the key, first dropping finished readers if they
    /// dominate the list (amortised O(1)).
    pub(crate) fn add_reader(&mut self, idx: u32, seq: u64, is_live: impl Fn(u64) -> bool) -> KeyRef {
        let e = &mut self.entries[idx as usize];
        if e.readers.len() >= 2 * e.live_readers as usize + COMPACT_SLACK {
            e.readers.retain(|&r| is_live(r));
            debug_assert_eq!(e.readers.len(), e.live_readers as usize);
        }
        e.readers.push(seq);
        e.live_readers += 1;
        KeyRef {
            entry: idx,
            epoch: e.epoch,
        }
    }

    /// Tx `seq` finished: stop pointing at it, and forget the key if no unfinished tx
    /// is left on it.
    pub(crate) fn release(&mut self, r: KeyRef, seq: u64) {
        let e = &mut self.entries[r.entry as usize];
        if r.epoch == WRITER {
            if e.last_writer != seq {
                return; // superseded by a later writer, which already waited for us
            }
            e.last_writer = NO_TX;
        } else {
            if e.epoch != r.epoch {
                return; // a later writer restarted the readers list
            }
            e.live_readers -= 1;
        }
        if e.last_writer == NO_TX && e.live_readers == 0 && !e.unused {
            e.readers.clear();
            e.unused = true;
            self.unused += 1;
            if self.unused > self.len() + PURGE_SLACK {
                self.purge();
            }
        }
    }

    /// Unmaps every unused key and recycles its entry.
    fn purge(&mut self) {
        let (entries, free) = (&mut self.entries, &mut self.free);
        self.map.retain(|_, idx| {
            let e = &mut entries[*idx as usize];
            if !e.unused {
                return true;
            }
            e.unused = false;
            free.push(*idx);
            false
        });
        self.unused = 0;
    }
}
