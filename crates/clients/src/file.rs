//! Small state files a node keeps beside its data (e.g. the consenter sets a follower
//! learned): replaced whole and durably.

use std::io::Write as _;
use std::path::Path;

/// Writes `bytes` to `path` durably: a temporary file beside it is written and synced,
/// renamed over `path`, and the directory synced, so `path` holds either the old or the
/// new bytes after a crash.
pub fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The bytes of `path`, or `None` if it does not exist.
pub fn read_if_present(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_a_missing_one_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.bin");
        assert_eq!(read_if_present(&path).unwrap(), None);
        write_durably(&path, b"one").unwrap();
        write_durably(&path, b"two").unwrap();
        assert_eq!(read_if_present(&path).unwrap(), Some(b"two".to_vec()));
        assert!(!path.with_extension("tmp").exists());
    }
}
