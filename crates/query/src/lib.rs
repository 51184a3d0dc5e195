//! The query service of a committing party (docs/query.md): consistent reads of the
//! party's committed state for wallets, tools and the token endorsers.
//!
//! - [`check`] is the pure part: which requests are well formed, and the page bounds;
//! - [`limiter`]: how many signed reads one reader may make (a bounded table);
//! - [`upstream`] calls the party's validator-committers with failover (they all read the
//!   one state database, so any of them answers for all);
//! - [`service`] is the gRPC shell (`fabrx.v1.Query`): `GetRows` → `VcService.ReadRows`,
//!   `GetOwned` → `VcService.OwnedRows`, `GetTxStatus` → `VcService.GetStatuses`, with a
//!   bound on the requests served at once;
//! - [`node`] runs it: `spawn(config) -> Handle`.
//!
//! The service keeps no state of its own: a snapshot's consistency comes from the
//! validator-committer, which reads every answer at one snapshot of the database.

pub mod check;
pub mod limiter;
pub mod metrics;
pub mod node;
pub mod reads;
pub mod service;
pub mod upstream;

pub use node::QueryLimits;
pub use reads::ReadPolicy;

/// Errors of the query service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable.
    #[error("configuration: {detail}")]
    Config {
        /// What is wrong.
        detail: String,
    },
    /// The listen address could not be bound.
    #[error("listen {addr}: {reason}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        reason: String,
    },
    /// Its metrics could not be made.
    #[error("query metrics: {0}")]
    Metrics(#[from] telemetry::Error),
    /// The gRPC server failed or its task ended.
    #[error("query server: {detail}")]
    Server {
        /// What happened.
        detail: String,
    },
}

impl From<wire::node::ServeError> for Error {
    fn from(e: wire::node::ServeError) -> Error {
        Error::Server { detail: e.reason }
    }
}

/// Result alias of the query service.
pub type Result<T> = std::result::Result<T, Error>;
