//! The crate's error type.

/// Errors of a consenter node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A protobuf message lacks a field or has a malformed one.
    #[error("malformed consensus message: {what}")]
    Decode {
        /// What is missing or malformed.
        what: &'static str,
    },
    /// An envelope failed verification and was dropped.
    #[error("envelope from {from} rejected: {reason}")]
    Rejected {
        /// Claimed sender.
        from: u32,
        /// Why.
        reason: &'static str,
    },
    /// Inconsistent node configuration.
    #[error("bad configuration: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },
    /// An I/O error (decisions log, listener).
    #[error("i/o error on {path}: {source}")]
    Io {
        /// File or resource.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The decisions log has a gap or a bad line before its end.
    #[error("decisions log {path} is corrupt after seq {after_seq}")]
    CorruptLog {
        /// The log file.
        path: String,
        /// Last good sequence number.
        after_seq: u64,
    },
    /// The decisions log's journal failed otherwise (locked, poisoned).
    #[error("decisions log {path}: {source}")]
    Log {
        /// The log directory.
        path: String,
        /// The journal's error.
        source: journal::Error,
    },
    /// The engine failed (WAL error, restore error).
    #[error(transparent)]
    Engine(#[from] bft::Error),
    /// The gRPC server failed.
    #[error("grpc server failed: {reason}")]
    Server {
        /// The transport error.
        reason: String,
    },
    /// The Arma application's outcome of a decision differs from what this node logged
    /// (or served) for it before, or the applied outcomes and the delivered decisions are
    /// out of step: the node stops rather than serve a different header for a number.
    #[error("decision {decision}: {reason}")]
    Diverged {
        /// The decision number.
        decision: u64,
        /// What differs.
        reason: String,
    },
    /// The Arma application refused its configuration or a snapshot.
    #[error(transparent)]
    Arma(#[from] crate::application::ArmaError),
    /// A config in force removed this node's party: the node stopped, as it should.
    #[error("party {party} left the network (a config update removed it): this consenter stopped")]
    PartyLeft {
        /// The party.
        party: types::PartyId,
    },
    /// A component stopped although the node should run forever.
    #[error("{what} stopped")]
    Stopped {
        /// Which component.
        what: &'static str,
    },
    /// Its metrics could not be made.
    #[error("consenter metrics: {0}")]
    Metrics(#[from] telemetry::Error),
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, Error>;
