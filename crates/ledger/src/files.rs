//! The index files next to the journal: the block-number index (`blocks.idx`) and
//! the index watermark (`index.meta`).

use journal::le::{u32_le, u64_le};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use journal::Position;

use crate::{Error, Result};

pub(crate) const CRC32C: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))
}

/// Length of one entry of the block-number index.
const NUM_ENTRY: u64 = 24;

/// `blocks.idx`: entry `i` is the journal position of block `base + i`:
/// `segment: u64 ‖ offset: u64 ‖ len: u32 ‖ crc32c(previous 20 bytes): u32`.
#[derive(Debug)]
pub(crate) struct NumIndex {
    pub path: PathBuf,
    pub file: File,
}

impl NumIndex {
    pub fn open(path: PathBuf) -> Result<NumIndex> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        Ok(NumIndex { path, file })
    }

    /// Number of entries the file has room for (some may be stale or torn).
    pub fn len(&self) -> Result<u64> {
        Ok(self.file.metadata().map_err(io_err(&self.path))?.len() / NUM_ENTRY)
    }

    pub fn write(&self, i: u64, pos: Position) -> Result<()> {
        let mut e = [0u8; NUM_ENTRY as usize];
        e[..8].copy_from_slice(&pos.segment.to_le_bytes());
        e[8..16].copy_from_slice(&pos.offset.to_le_bytes());
        e[16..20].copy_from_slice(&pos.len.to_le_bytes());
        let crc = CRC32C.checksum(&e[..20]);
        e[20..].copy_from_slice(&crc.to_le_bytes());
        self.file
            .write_all_at(&e, i * NUM_ENTRY)
            .map_err(io_err(&self.path))
    }

    pub fn read(&self, i: u64) -> Result<Position> {
        let mut e = [0u8; NUM_ENTRY as usize];
        self.file
            .read_exact_at(&mut e, i * NUM_ENTRY)
            .map_err(io_err(&self.path))?;
        let crc = u32_le(&e[20..]);
        if CRC32C.checksum(&e[..20]) != crc {
            return Err(Error::Corrupt {
                path: self.path.clone(),
                detail: format!("bad entry {i} in the block-number index"),
            });
        }
        Ok(Position {
            segment: u64_le(&e[..8]),
            offset: u64_le(&e[8..16]),
            len: u32_le(&e[16..20]),
        })
    }

    /// Keeps the first `count` entries.
    pub fn truncate(&self, count: u64) -> Result<()> {
        self.file.set_len(count * NUM_ENTRY).map_err(io_err(&self.path))
    }

    pub fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(io_err(&self.path))
    }
}

const META_MAGIC: [u8; 4] = *b"FXLI";
const META_VERSION: u32 = 1;
const META_LEN: usize = 36;

/// `index.meta`: what the index files hold durably. Replaced atomically (temporary
/// file, rename, directory sync) at each checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    /// Block number of entry 0 of `blocks.idx`.
    pub base: u64,
    /// Every block below this number is in both indexes, durably.
    pub watermark: u64,
    /// Occupied slots of the tx table at the watermark.
    pub tx_count: u64,
}

impl Meta {
    fn encode(&self) -> [u8; META_LEN] {
        let mut m = [0u8; META_LEN];
        m[..4].copy_from_slice(&META_MAGIC);
        m[4..8].copy_from_slice(&META_VERSION.to_le_bytes());
        m[8..16].copy_from_slice(&self.base.to_le_bytes());
        m[16..24].copy_from_slice(&self.watermark.to_le_bytes());
        m[24..32].copy_from_slice(&self.tx_count.to_le_bytes());
        let crc = CRC32C.checksum(&m[..32]);
        m[32..].copy_from_slice(&crc.to_le_bytes());
        m
    }

    /// The meta file of `dir`: `Ok(None)` if absent, an error if unreadable or bad.
    pub fn load(dir: &Path) -> Result<Option<Meta>> {
        let path = dir.join("index.meta");
        let m = match std::fs::read(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let u64_at = |i: usize| u64_le(&m[i..i + 8]);
        let valid = m.len() == META_LEN
            && m[..4] == META_MAGIC
            && m[4..8] == META_VERSION.to_le_bytes()
            && CRC32C.checksum(&m[..32]).to_le_bytes() == m[32..36];
        if !valid {
            return Err(Error::Corrupt {
                path,
                detail: "bad index meta file".into(),
            });
        }
        Ok(Some(Meta {
            base: u64_at(8),
            watermark: u64_at(16),
            tx_count: u64_at(24),
        }))
    }

    /// Replaces the meta file of `dir` atomically.
    pub fn store(&self, dir: &Path, sync: bool) -> Result<()> {
        let tmp = dir.join("index.meta.tmp");
        let path = dir.join("index.meta");
        let write = || -> std::io::Result<()> {
            let f = File::create(&tmp)?;
            f.write_all_at(&self.encode(), 0)?;
            if sync {
                f.sync_all()?;
            }
            std::fs::rename(&tmp, &path)
        };
        write().map_err(io_err(&path))?;
        if sync {
            sync_dir(dir)?;
        }
        Ok(())
    }
}
