//! The file system under a node's data directory, measured at each scrape:
//! `fabrx_data_dir_available_bytes` and `fabrx_data_dir_size_bytes` (docs/metrics.md).

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, Opts};
use std::path::PathBuf;

/// The name of the bytes an unprivileged process may still write there.
pub const AVAILABLE: &str = "fabrx_data_dir_available_bytes";
/// The name of the file system's size.
pub const SIZE: &str = "fabrx_data_dir_size_bytes";

/// A collector that asks the file system under `path` for its size and free space
/// each time it is gathered; a failed query (the directory is gone) reports nothing.
pub(crate) struct DataDir {
    path: PathBuf,
    available: IntGauge,
    size: IntGauge,
}

impl DataDir {
    /// The collector of `path`.
    pub(crate) fn new(path: PathBuf) -> prometheus::Result<DataDir> {
        Ok(DataDir {
            path,
            available: IntGauge::with_opts(Opts::new(
                AVAILABLE,
                "Bytes free for the node on the file system of its data directory",
            ))?,
            size: IntGauge::with_opts(Opts::new(
                SIZE,
                "Size in bytes of the file system of the node's data directory",
            ))?,
        })
    }

    /// Available and total bytes of the file system, now.
    fn measure(&self) -> std::io::Result<(u64, u64)> {
        let s = rustix::fs::statvfs(&self.path)?;
        let unit = s.f_frsize;
        Ok((s.f_bavail.saturating_mul(unit), s.f_blocks.saturating_mul(unit)))
    }
}

impl Collector for DataDir {
    fn desc(&self) -> Vec<&Desc> {
        let mut d = self.available.desc();
        d.extend(self.size.desc());
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        match self.measure() {
            Ok((available, size)) => {
                self.available.set(i64::try_from(available).unwrap_or(i64::MAX));
                self.size.set(i64::try_from(size).unwrap_or(i64::MAX));
                let mut families = self.available.collect();
                families.extend(self.size.collect());
                families
            }
            Err(e) => {
                tracing::debug!(path = %self.path.display(), error = %e, "measuring the data directory");
                Vec::new()
            }
        }
    }
}
