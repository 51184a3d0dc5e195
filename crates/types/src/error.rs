//! The error type of the `types` crate.

/// Errors of the domain model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A quorum was asked for zero parties.
    #[error("a network needs at least one party, got {parties}")]
    NoParties {
        /// The number of parties given.
        parties: usize,
    },
    /// Shard mapping was asked for zero shards.
    #[error("shard count must be at least 1, got {shards}")]
    NoShards {
        /// The number of shards given.
        shards: u32,
    },
    /// An encoded height had the wrong length.
    #[error("an encoded height is {expected} bytes, got {got}")]
    BadHeightLength {
        /// Required length.
        expected: usize,
        /// Length seen.
        got: usize,
    },
    /// A status code number that fabrx does not define.
    #[error("unknown status code {code}")]
    UnknownStatusCode {
        /// The number seen.
        code: u32,
    },
    /// A status name that fabrx does not define.
    #[error("unknown status name {name:?}")]
    UnknownStatusName {
        /// The name seen.
        name: String,
    },
    /// A policy scheme name that fabrx does not support.
    #[error("unknown signature scheme {name:?}")]
    UnknownScheme {
        /// The name seen.
        name: String,
    },
    /// A block holds more txs than a height can address.
    #[error("block {block} holds more than u32::MAX txs")]
    TooManyTxs {
        /// The block number.
        block: u64,
    },
}

/// Result alias of the `types` crate.
pub type Result<T> = std::result::Result<T, Error>;
