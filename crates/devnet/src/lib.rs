//! The development network of fabrx: what `fabrx up`, `down`, `status` and the bench
//! suites share, as library code the command-line shell calls.
//!
//! * [`file`] — `network.json`, typed: what `fabrx up` started.
//! * [`pg`] — PostgreSQL administration (naming and creating the databases a `--db` URL
//!   implies), in one place.
//! * [`status`] — the metrics of `fabrx status --watch`: parsing a `/metrics` page, each
//!   role's metric names, the table.
//! * [`height`] — the heights `fabrx status` probes (assembler, sidecar, consenter).
//! * [`cpu`] — CPU time of a process, for cost per tx.

pub mod cpu;
pub mod file;
pub mod height;
pub mod pg;
pub mod status;

/// Errors of the development network's library code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A file does not parse (or could not be encoded).
    #[error("{} does not parse: {reason}", path.display())]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// A database could not be named, created or dropped.
    #[error("{what}: {reason}")]
    Database {
        /// What was done, or the value refused.
        what: String,
        /// Why it failed.
        reason: String,
    },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, Error>;
