//! The committer's sidecar (FX §3.2): blocks in, structural checks, the coordinator's
//! dependency graph, signature verification and validate-and-commit through stages,
//! statuses out per block, in block order; the block store, notifications and lookups.
//!
//! - [`core`] is the deciding logic as a pure state machine (intake, graph, aggregation,
//!   policy updates, job limit), [`pipeline`] its shell;
//! - [`intake`] decides what a block's txs need (structural status, duplicate id);
//! - [`stages`] are the two stages as traits, [`remote`] their gRPC pools with failover
//!   (in-process stages are wired by the `committer` composition crate);
//! - [`store`], [`notify`] and [`service`] keep and serve what was committed;
//! - [`node`] is the sidecar as a process: `Config`, `spawn(config, deps) -> Handle`.

pub mod core;
pub mod intake;
pub mod metrics;
pub mod node;
pub mod notify;
pub mod orderer;
pub mod pipeline;
pub mod remote;
pub mod service;
pub mod stages;
pub mod store;

/// Errors of the sidecar.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Blocks must arrive in order.
    #[error("expected block {expected}, got {got}")]
    OutOfOrder {
        /// The next block number.
        expected: u64,
        /// The block number seen.
        got: u64,
    },
    /// The dependency graph refused an input.
    #[error("coordinator: {0}")]
    Coordinator(#[from] coordinator::Error),
    /// The in-process validator-committer failed (no status was decided).
    #[error("vcservice: {source}")]
    Commit {
        /// The validator-committer's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A policy key does not parse.
    #[error("policy: {0}")]
    Policy(#[from] policy::Error),
    /// Metrics could not be made.
    #[error("sidecar metrics: {0}")]
    Metrics(#[from] telemetry::Error),
    /// A message could not be converted to or from the wire.
    #[error("wire: {0}")]
    Wire(#[from] wire::Error),
    /// The service could not listen.
    #[error("listen {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A block cannot be admitted (e.g. more txs than a height can address).
    #[error("block: {0}")]
    Block(#[from] types::Error),
    /// A pipeline stage failed outside of any status (a task died).
    #[error("{stage}: {detail}")]
    Stage {
        /// The stage.
        stage: &'static str,
        /// What happened.
        detail: String,
    },
    /// A remote service refused a call (not retried).
    #[error("{service} at {endpoint} refused: {detail}")]
    Remote {
        /// The service kind.
        service: &'static str,
        /// The endpoint.
        endpoint: String,
        /// The gRPC status.
        detail: String,
    },
    /// No endpoint of a service answered before the give-up time.
    #[error("{service} unavailable: {detail}")]
    Unavailable {
        /// The service kind.
        service: &'static str,
        /// The last failure.
        detail: String,
    },
    /// A configuration value is unusable.
    #[error("configuration: {detail}")]
    Config {
        /// What is wrong.
        detail: String,
    },
    /// An I/O operation of the block store failed.
    #[error("block store {path}: {source}")]
    StoreIo {
        /// The file or directory.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The block store holds a record that is neither valid nor a torn tail.
    #[error("block store {path} corrupt at offset {offset}: {detail}")]
    StoreCorrupt {
        /// The segment file.
        path: String,
        /// Offset of the bad record.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A block appended out of order (the store holds one record per number, in order).
    #[error("block store expects block {expected}, got {got}")]
    StoreOutOfOrder {
        /// The next block number of the store.
        expected: u64,
        /// The number appended.
        got: u64,
    },
    /// The store starts at another block than configured.
    #[error("block store starts at block {stored}, configured {configured}")]
    StoreFirstBlockMismatch {
        /// The first block of the existing store.
        stored: u64,
        /// The configured first block.
        configured: u64,
    },
    /// Another writer holds the block store.
    #[error("block store {path} is locked by another writer")]
    StoreLocked {
        /// The store directory.
        path: String,
    },
    /// An earlier append failed half-way; the store must be reopened.
    #[error("block store refuses appends after a failed write; reopen it")]
    StorePoisoned,
    /// A block record exceeds the 4 GiB record limit.
    #[error("block {number} record is {bytes} bytes, over the record limit")]
    StoreRecordTooLarge {
        /// The block number.
        number: u64,
        /// Its encoded size.
        bytes: usize,
    },
    /// A subscription was dropped because it did not read its events in time.
    #[error("subscription dropped: more than {capacity} events were not read")]
    SubscriptionLagged {
        /// The subscription's channel capacity.
        capacity: usize,
    },
    /// A watch would exceed the memory allowed for subscriptions.
    #[error(
        "subscriptions full: watching one more id would hold {bytes} bytes of registrations \
         for {which}, over the limit of {limit}"
    )]
    SubscriptionsFull {
        /// "this subscription" or "all subscriptions".
        which: &'static str,
        /// Bytes that would be held.
        bytes: usize,
        /// The limit crossed.
        limit: usize,
    },
    /// The notifier is gone (the sidecar is shutting down).
    #[error("notifier closed")]
    NotifierClosed,
}

/// Result alias of the sidecar.
pub type Result<T> = std::result::Result<T, Error>;
