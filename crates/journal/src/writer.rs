//! The single writer: open (check, repair a torn tail), append, sync, roll, prune.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use crate::format::{self, HEADER_LEN};
use crate::reader::{JournalReader, Seg, State};
use crate::segments::{self, segment_path, sync_dir};
use crate::{Config, Durability, Error, Position, Result, io_err};

/// Where an appended record went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Its sequence number.
    pub seq: u64,
    /// Where it lives.
    pub position: Position,
}

/// The writer of a journal directory (one per directory, held by an advisory lock).
/// See the crate docs for the format and the torn-tail rule.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    config: Config,
    reader: JournalReader,
    /// The last segment, opened for appending.
    active: File,
    /// First sequence number of the last segment.
    active_first: u64,
    /// Valid length of the last segment.
    active_len: u64,
    /// Bytes of torn tail cut off by `open`.
    cut_on_open: u64,
    /// Frame buffer, reused across appends.
    buf: Vec<u8>,
    /// Set when a write or sync failed: the journal must be reopened.
    poisoned: bool,
    _lock: File,
}

fn validate(config: &Config) -> Result<()> {
    let ext = config.extension;
    if ext.is_empty() || ext.contains(['/', '.']) {
        return Err(Error::Config {
            detail: format!("segment extension {ext:?} must be a non-empty name without '.' or '/'"),
        });
    }
    Ok(())
}

/// Takes the writer lock of `dir` (creating the directory and the lock file).
fn lock(dir: &Path, durability: Durability) -> Result<File> {
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        if let (Some(parent), true) = (dir.parent(), durability != Durability::NoSync) {
            sync_dir(if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            })?;
        }
    }
    let path = dir.join("LOCK");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(&path))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(io_err(&path)(e)),
    }
}

impl Journal {
    /// Opens (or creates) the journal in `dir`: takes the writer lock, checks every
    /// segment, truncates a torn tail of the last one. Fails on corruption (nothing is
    /// cut then) and if another writer holds the directory.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Journal> {
        validate(&config)?;
        let dir = dir.as_ref().to_path_buf();
        let sync = config.durability != Durability::NoSync;
        let lock = lock(&dir, config.durability)?;
        let mut found = segments::list(&dir, config.extension)?;
        if found.is_empty() {
            let path = segment_path(&dir, config.first_seq, config.extension);
            File::create_new(&path).map_err(io_err(&path))?;
            if sync {
                sync_dir(&dir)?;
            }
            found.push((config.first_seq, path));
        }
        let last = segments::check(&found, config.max_record_bytes.get())?;
        let Some((active_first, active_path)) = found.last().cloned() else {
            return Err(Error::Config {
                detail: "a journal needs at least one segment".into(),
            });
        };
        if last.scan.valid < last.file_len {
            tracing::warn!(
                segment = %active_path.display(),
                valid = last.scan.valid,
                len = last.file_len,
                "cutting off a torn tail of the journal"
            );
            let file = OpenOptions::new()
                .write(true)
                .open(&active_path)
                .map_err(io_err(&active_path))?;
            file.set_len(last.scan.valid).map_err(io_err(&active_path))?;
            if sync {
                file.sync_all().map_err(io_err(&active_path))?;
            }
        }
        let mut state = State {
            next_seq: active_first + last.scan.records.len() as u64,
            ..State::default()
        };
        for (first, path) in found {
            state.segments.insert(first, Seg::open(path)?);
        }
        let active = OpenOptions::new()
            .append(true)
            .open(&active_path)
            .map_err(io_err(&active_path))?;
        Ok(Journal {
            reader: JournalReader {
                state: Arc::new(RwLock::new(state)),
                max_len: config.max_record_bytes.get(),
            },
            dir,
            config,
            active,
            active_first,
            active_len: last.scan.valid,
            cut_on_open: last.file_len - last.scan.valid,
            buf: Vec::new(),
            poisoned: false,
            _lock: lock,
        })
    }

    /// A read handle sharing this journal's segments.
    pub fn reader(&self) -> JournalReader {
        self.reader.clone()
    }

    /// The journal directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sequence number of the oldest record held (or of the next one, when empty).
    pub fn first_seq(&self) -> u64 {
        self.reader.first_seq()
    }

    /// Sequence number of the next record to append.
    pub fn next_seq(&self) -> u64 {
        self.reader.next_seq()
    }

    /// Bytes of torn tail that [`Journal::open`] cut off (0 after a clean shutdown).
    pub fn cut_on_open(&self) -> u64 {
        self.cut_on_open
    }

    fn state_mut(&self) -> RwLockWriteGuard<'_, State> {
        self.reader.state.write().unwrap_or_else(|e| e.into_inner())
    }

    fn sync_enabled(&self) -> bool {
        self.config.durability != Durability::NoSync
    }

    /// Appends one record and returns where it went. With
    /// [`Durability::SyncEachAppend`] it is durable on return. After a failed write or
    /// sync the journal refuses appends ([`Error::Poisoned`]); reopen it.
    pub fn append(&mut self, payload: &[u8]) -> Result<Appended> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        let max = self.config.max_record_bytes.get();
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|len| *len <= max)
            .ok_or(Error::RecordTooLarge {
                len: payload.len(),
                max,
            })?;
        let record_len = (HEADER_LEN as u64) + u64::from(len);
        if self.active_len > 0 && self.active_len + record_len > self.config.segment_bytes.get() {
            self.roll()?;
        }
        self.buf.clear();
        format::encode(payload, &mut self.buf);
        let offset = self.active_len;
        if let Err(e) = self.active.write_all(&self.buf) {
            self.poisoned = true;
            let _ = self.active.set_len(offset);
            return Err(io_err(self.active_path())(e));
        }
        if self.config.durability == Durability::SyncEachAppend {
            self.sync_active()?;
        }
        self.active_len += record_len;
        let mut state = self.state_mut();
        let seq = state.next_seq;
        state.next_seq += 1;
        Ok(Appended {
            seq,
            position: Position {
                segment: self.active_first,
                offset,
                len,
            },
        })
    }

    /// Makes every appended record durable (the explicit sync of
    /// [`Durability::Manual`]; a no-op with [`Durability::NoSync`]).
    pub fn sync(&mut self) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if self.sync_enabled() {
            self.sync_active()?;
        }
        Ok(())
    }

    fn sync_active(&mut self) -> Result<()> {
        self.active.sync_data().map_err(|e| {
            self.poisoned = true;
            io_err(self.active_path())(e)
        })
    }

    fn active_path(&self) -> PathBuf {
        segment_path(&self.dir, self.active_first, self.config.extension)
    }

    /// Closes the last segment (synced, so that no earlier segment can have a torn
    /// tail) and starts a new one at the next sequence number.
    fn roll(&mut self) -> Result<()> {
        if self.sync_enabled() {
            self.sync_active()?;
        }
        let first = self.next_seq();
        let path = segment_path(&self.dir, first, self.config.extension);
        let opened = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(io_err(&path))
            .and_then(|active| Ok((active, Seg::open(path.clone())?)));
        let (active, seg) = opened.inspect_err(|_| self.poisoned = true)?;
        if self.sync_enabled() {
            sync_dir(&self.dir).inspect_err(|_| self.poisoned = true)?;
        }
        self.active = active;
        self.active_first = first;
        self.active_len = 0;
        self.state_mut().segments.insert(first, seg);
        Ok(())
    }

    /// Drops every record and continues at sequence number `first` (at least the next
    /// one): for a log whose owner jumped ahead (state transfer). The old segments go
    /// first, oldest first, and the new one is created last, so a crash leaves a suffix
    /// of the old records, an empty directory, or the new segment.
    pub fn restart_at(&mut self, first: u64) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if first < self.next_seq() {
            return Err(Error::Config {
                detail: format!(
                    "cannot restart at {first}, before the next record {}",
                    self.next_seq()
                ),
            });
        }
        let old: Vec<Arc<Seg>> = {
            let mut state = self.state_mut();
            state.next_seq = first;
            std::mem::take(&mut state.segments).into_values().collect()
        };
        self.poisoned = true; // until the new segment is in place
        for seg in &old {
            std::fs::remove_file(&seg.path).map_err(io_err(&seg.path))?;
        }
        if self.sync_enabled() {
            sync_dir(&self.dir)?;
        }
        let path = segment_path(&self.dir, first, self.config.extension);
        let active = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(io_err(&path))?;
        if self.sync_enabled() {
            sync_dir(&self.dir)?;
        }
        let seg = Seg::open(path)?;
        self.active = active;
        self.active_first = first;
        self.active_len = 0;
        self.state_mut().segments.insert(first, seg);
        self.poisoned = false;
        Ok(())
    }

    /// Removes every segment whose records all come before `seq` (pruning). The last
    /// segment is never removed, so fewer records may go than asked for; returns the
    /// number of segments removed. Readers holding a position in a removed segment get
    /// [`Error::NoSegment`].
    pub fn truncate_front(&mut self, seq: u64) -> Result<usize> {
        let removed: Vec<Arc<Seg>> = {
            let mut state = self.state_mut();
            let firsts: Vec<u64> = state.segments.keys().copied().collect();
            firsts
                .windows(2)
                .take_while(|pair| pair[1] <= seq)
                .filter_map(|pair| state.segments.remove(&pair[0]))
                .collect()
        };
        for seg in &removed {
            std::fs::remove_file(&seg.path).map_err(io_err(&seg.path))?;
        }
        if !removed.is_empty() && self.sync_enabled() {
            sync_dir(&self.dir)?;
        }
        Ok(removed.len())
    }
}
