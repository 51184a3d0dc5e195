//! Segment files: names, listing, directory sync and the checks run on open.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::format::{self, HEADER_LEN, Header, Scan};
use crate::{Error, Result, io_err};

/// The file of the segment starting at `first`.
pub(crate) fn segment_path(dir: &Path, first: u64, extension: &str) -> PathBuf {
    dir.join(format!("{first:020}.{extension}"))
}

/// The segments of `dir` as `(first seq, path)`, sorted.
pub(crate) fn list(dir: &Path, extension: &str) -> Result<Vec<(u64, PathBuf)>> {
    let suffix = format!(".{extension}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(&suffix)) else {
            continue;
        };
        if stem.len() == 20
            && let Ok(first) = stem.parse::<u64>()
        {
            found.push((first, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// Makes the directory entries of `dir` durable (after a create or remove).
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))
}

/// The last segment as found on open: its records and the length of its file.
#[derive(Debug)]
pub(crate) struct Last {
    /// The checked records and the valid prefix.
    pub scan: Scan,
    /// The file length (larger than `scan.valid` when the tail is torn).
    pub file_len: u64,
}

/// Checks every segment of a journal by the torn-tail rule: headers of the earlier
/// segments (each must hold exactly the records up to the next one's first), every
/// record of the last one. Repairs nothing.
pub(crate) fn check(found: &[(u64, PathBuf)], max_len: u32) -> Result<Last> {
    for pair in found.windows(2) {
        let ((first, path), (next, _)) = (&pair[0], &pair[1]);
        if next <= first {
            return Err(corrupt(path, 0, *first, format!("next segment starts at {next}")));
        }
        walk_headers(path, *first, next - first, max_len)?;
    }
    let Some((first, path)) = found.last() else {
        return Err(Error::Config {
            detail: "a journal needs at least one segment".into(),
        });
    };
    let buf = std::fs::read(path).map_err(io_err(path))?;
    let scan = format::scan(&buf, max_len).map_err(|c| corrupt(path, c.offset, first + c.index, c.detail))?;
    Ok(Last {
        scan,
        file_len: buf.len() as u64,
    })
}

pub(crate) fn corrupt(path: &Path, offset: u64, seq: u64, detail: String) -> Error {
    Error::Corrupt {
        segment: path.to_path_buf(),
        offset,
        seq,
        detail,
    }
}

/// Walks the headers of a segment that is not the last: `count` records whose length
/// CRCs hold, ending exactly at the end of the file.
fn walk_headers(path: &Path, first: u64, count: u64, max_len: u32) -> Result<()> {
    let file = File::open(path).map_err(io_err(path))?;
    let file_len = file.metadata().map_err(io_err(path))?.len();
    let mut pos = 0u64;
    let mut header = [0u8; HEADER_LEN];
    for i in 0..count {
        let seq = first + i;
        if pos + HEADER_LEN as u64 > file_len {
            let detail = format!("segment ends after {i} of its {count} records");
            return Err(corrupt(path, pos, seq, detail));
        }
        file.read_exact_at(&mut header, pos).map_err(io_err(path))?;
        let Some(h) = Header::parse(&header) else {
            return Err(corrupt(path, pos, seq, "bad record header".into()));
        };
        if h.len > max_len {
            let detail = format!("record of {} bytes over the maximum of {max_len}", h.len);
            return Err(corrupt(path, pos, seq, detail));
        }
        pos += (HEADER_LEN as u64) + u64::from(h.len);
    }
    if pos != file_len {
        let detail = format!("segment of {count} records is {file_len} bytes, its records end at {pos}");
        return Err(corrupt(path, pos.min(file_len), first + count, detail));
    }
    Ok(())
}
