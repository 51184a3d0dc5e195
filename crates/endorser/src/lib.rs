//! The token endorser (docs/token.md "Endorsement"): one holder of a share of the token
//! namespace's t-of-n threshold BLS key.
//!
//! - [`core`] decides (pure): the request's checks, the settlement tx, the partial
//!   signature;
//! - [`service`] is the gRPC shell: it reads the inputs through a query service at one
//!   snapshot and answers `Endorser.Endorse`;
//! - [`node`] runs the service as a process.
//!
//! Stateless: any number of endorsers may run; each signs only what it checked.

pub mod core;
pub mod metrics;
pub mod node;
pub mod service;

pub use core::{Endorsement, EndorserCore, Prepared};

/// Errors of an endorser node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// A key could not be read or does not fit the threshold set.
    #[error("key share: {0}")]
    Key(String),
    /// The server failed.
    #[error("server: {0}")]
    Server(#[from] tonic::transport::Error),
    /// Listening failed.
    #[error("listen: {0}")]
    Io(#[from] std::io::Error),
    /// The listener could not be bound.
    #[error(transparent)]
    Listen(#[from] wire::node::ListenError),
    /// The server stopped on its own.
    #[error(transparent)]
    Serve(#[from] wire::node::ServeError),
    /// Metrics could not be made.
    #[error("endorser metrics: {0}")]
    Metrics(#[from] telemetry::Error),
}

/// Result alias of the endorser.
pub type Result<T> = std::result::Result<T, Error>;
