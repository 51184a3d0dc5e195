//! The crate's error type.

use crate::types::{ReplicaId, Seq, View};

/// Errors of the BFT engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A certificate failed verification.
    #[error("bad certificate for seq {seq}: {reason}")]
    BadCertificate {
        /// Sequence number the certificate claims.
        seq: Seq,
        /// What is wrong with it.
        reason: String,
    },
    /// A view-change message failed verification.
    #[error("bad view change from replica {from}: {reason}")]
    BadViewChange {
        /// Claimed sender.
        from: ReplicaId,
        /// What is wrong with it.
        reason: String,
    },
    /// A new-view message failed verification.
    #[error("bad new view for view {view}: {reason}")]
    BadNewView {
        /// The view it claims to install.
        view: View,
        /// What is wrong with it.
        reason: String,
    },
    /// A stable checkpoint failed verification.
    #[error("bad checkpoint at seq {seq}: {reason}")]
    BadCheckpoint {
        /// Sequence number the checkpoint claims.
        seq: Seq,
        /// What is wrong with it.
        reason: String,
    },
    /// An I/O error on the WAL file.
    #[error("wal i/o error on {path}: {source}")]
    Io {
        /// WAL file.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The WAL holds a bad record that is not the last one.
    #[error("wal {path} is corrupt at offset {offset}")]
    WalCorrupt {
        /// WAL file.
        path: String,
        /// Offset of the bad record.
        offset: u64,
    },
    /// The WAL holds a record of a format this version does not read (written by an
    /// earlier version).
    #[error("wal {path} holds a record at offset {offset} of an older format: {reason}")]
    WalFormat {
        /// WAL directory.
        path: String,
        /// Offset of the record.
        offset: u64,
        /// Which format and why it is refused.
        reason: String,
    },
    /// The WAL's journal failed otherwise (locked by another writer, an entry over
    /// the record limit, a failed write that poisoned it).
    #[error("wal {path}: {source}")]
    Wal {
        /// WAL directory.
        path: String,
        /// The journal's error.
        source: journal::Error,
    },
    /// The WAL contradicts itself or the configuration (e.g. another instance).
    #[error("wal replay failed: {reason}")]
    WalReplay {
        /// What is inconsistent.
        reason: String,
    },
    /// The shell's peer channel is closed.
    #[error("channel closed: {what}")]
    ChannelClosed {
        /// Which channel.
        what: &'static str,
    },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, Error>;
