//! The crate's error type: invalid configurations, full bounds and broken batcher links.
//! Each maps to the gRPC code a client sees ([`Error::code`]).

use crate::answer::BatcherRefusal;
use crate::refusal::Refusal;
use types::ShardId;

/// Errors of the router.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of range or contradicts another.
    #[error("router config: {field} {problem}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// Its metrics could not be made (a name taken twice in one registry).
    #[error("router metrics: {0}")]
    Metrics(String),
    /// The router cannot listen on its address.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// The system's reason.
        reason: String,
    },
    /// The node's server stopped on its own.
    #[error(transparent)]
    Serve(#[from] wire::node::ServeError),
    /// The request failed the router's own checks.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The batcher refused the request.
    #[error("the batcher refused the request: {reason}")]
    BatcherRefused {
        /// The batcher's reason.
        reason: BatcherRefusal,
    },
    /// A shard outside `0..shards` (a bug or a config mismatch).
    #[error("shard {shard} is not in 0..{shards}")]
    UnknownShard {
        /// The shard.
        shard: ShardId,
        /// Number of shards.
        shards: u32,
    },
    /// The shard's link holds its maximum number of unanswered requests.
    #[error("shard {shard}: {held} requests await the batcher's answer (max {max}); retry later")]
    ShardFullRequests {
        /// The shard.
        shard: ShardId,
        /// Requests in flight.
        held: usize,
        /// The bound.
        max: usize,
    },
    /// The request would take the shard's unanswered bytes over the bound.
    #[error(
        "shard {shard}: {held} bytes await the batcher's answer, {size} more would pass {max}; retry later"
    )]
    ShardFullBytes {
        /// The shard.
        shard: ShardId,
        /// Bytes in flight.
        held: u64,
        /// The request's size.
        size: u64,
        /// The bound.
        max: u64,
    },
    /// The link to the batcher is down (connecting, or broken while the request waited).
    #[error("the batcher of shard {shard} is unavailable: {reason}")]
    LinkDown {
        /// The shard.
        shard: ShardId,
        /// Why.
        reason: String,
    },
    /// The link's pending map or send queue is full.
    #[error("the link to the batcher of shard {shard} is full ({max} pending); retry later")]
    LinkBusy {
        /// The shard.
        shard: ShardId,
        /// The bound.
        max: usize,
    },
    /// A bug: what the router's parts told each other does not add up.
    #[error("router internal error: {0}")]
    Internal(String),
    /// The batcher did not answer within the answer timeout.
    #[error("the batcher of shard {shard} did not answer within {timeout_ms} ms")]
    NoAnswer {
        /// The shard.
        shard: ShardId,
        /// The timeout.
        timeout_ms: u64,
    },
}

impl Error {
    /// The gRPC code a client sees for this error (`docs/router.md` "Codes").
    pub fn code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            Error::Refused(r) => r.code(),
            Error::BatcherRefused { reason } => reason.code(),
            Error::ShardFullRequests { .. } | Error::ShardFullBytes { .. } | Error::LinkBusy { .. } => {
                Code::ResourceExhausted
            }
            Error::LinkDown { .. } => Code::Unavailable,
            Error::NoAnswer { .. } => Code::DeadlineExceeded,
            Error::InvalidConfig { .. }
            | Error::Listen { .. }
            | Error::Metrics(_)
            | Error::Serve(_)
            | Error::UnknownShard { .. }
            | Error::Internal(_) => Code::Internal,
        }
    }
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, Error>;

impl From<wire::node::ListenError> for Error {
    fn from(e: wire::node::ListenError) -> Self {
        Error::Listen {
            addr: e.addr,
            reason: e.reason,
        }
    }
}
