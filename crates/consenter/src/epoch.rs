//! The boot epoch of a replica: the first half of the position of every envelope it
//! sends (`keys::EnvelopeSeq`). Receivers accept only positions above the last one
//! they accepted from a sender, so a restarted replica must start above every
//! position it used before. The epoch is `max(previous epoch + 1, wall clock in
//! milliseconds)`, and it is made durable (written, fsynced, renamed into place)
//! before the replica sends anything: it grows across restarts even if the clock went
//! backwards, and a replica whose epoch file is lost starts from the clock, which is
//! above any epoch it used unless the clock went back as well.

use std::io::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{Error, Result};

/// Reads the previous epoch from `path` (none if the file is missing), makes the next
/// one durable there and returns it.
pub fn next_boot_epoch(path: &Path) -> Result<u64> {
    let io = |source: std::io::Error| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let previous = match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse::<u64>().map_err(|_| Error::Config {
            reason: format!("boot epoch file {} does not hold a number", path.display()),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io(e)),
    };
    let clock = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let next = previous.checked_add(1).ok_or(Error::Config {
        reason: format!("boot epoch in {} is exhausted", path.display()),
    })?;
    let epoch = next.max(clock);
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(epoch.to_string().as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_grows_across_restarts_even_if_the_clock_is_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replica.epoch");
        let first = next_boot_epoch(&path).unwrap();
        assert!(first > 1_600_000_000_000, "starts from the wall clock");
        let second = next_boot_epoch(&path).unwrap();
        assert!(second > first);
        // A previous epoch far in the future (the clock went back): still above it.
        std::fs::write(&path, (u64::MAX - 5).to_string()).unwrap();
        assert_eq!(next_boot_epoch(&path).unwrap(), u64::MAX - 4);
        std::fs::write(&path, u64::MAX.to_string()).unwrap();
        assert!(next_boot_epoch(&path).is_err());
        std::fs::write(&path, "garbage").unwrap();
        assert!(next_boot_epoch(&path).is_err());
    }
}
