//! The coordinator's error type.

use types::Height;

/// What went wrong when feeding the dependency graph. Every error leaves the graph
/// unchanged; all of them are caller bugs or back-pressure signals, none is a fault of
/// the transactions themselves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A block arrived out of order: blocks must be merged strictly by block number.
    #[error("out-of-order block: expected block {expected}, got {got}")]
    OutOfOrderBlock {
        /// The block number the graph expects next.
        expected: u64,
        /// The block number that was offered.
        got: u64,
    },
    /// A transaction's height names another block than the one it was given with.
    #[error("tx at {height:?} does not belong to block {block_number}")]
    HeightOutsideBlock {
        /// The block being built.
        block_number: u64,
        /// The offending height.
        height: Height,
    },
    /// Heights within a block must strictly increase (gaps are allowed).
    #[error("tx heights not increasing in block {block_number}: {got:?} after {previous:?}")]
    HeightNotIncreasing {
        /// The block being built.
        block_number: u64,
        /// The height of the previous transaction.
        previous: Height,
        /// The height that did not increase.
        got: Height,
    },
    /// The graph holds `limit` or more unfinished transactions: the caller must wait for
    /// completions before adding the next block (check `has_capacity()` first).
    #[error("dependency graph full: {pending} pending txs, limit {limit}")]
    GraphFull {
        /// Unfinished transactions in the graph.
        pending: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The graph spans `limit` or more merged txs from the oldest unfinished one: the
    /// caller must wait for that tx to complete (check `has_capacity()` first).
    #[error("dependency graph window full: {window} txs since the oldest unfinished, limit {limit}")]
    WindowFull {
        /// Merged txs from the oldest unfinished one to the newest.
        window: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A local graph was built with a key hasher of another seed than the graph's.
    #[error("local graph hashed with seed {got}, graph uses seed {expected}")]
    HasherMismatch {
        /// The graph's hash seed.
        expected: u64,
        /// The local graph's hash seed.
        got: u64,
    },
    /// `complete` named a height the graph does not hold (never added, or finished and
    /// already forgotten).
    #[error("no tx at {height:?} in the dependency graph")]
    UnknownTx {
        /// The height named.
        height: Height,
    },
    /// `complete` named a transaction that has not been released yet.
    #[error("tx at {height:?} completed before it was released")]
    NotReleased {
        /// The height named.
        height: Height,
    },
    /// `complete` named a transaction that already finished.
    #[error("tx at {height:?} completed twice")]
    AlreadyFinished {
        /// The height named.
        height: Height,
    },
}

/// Result with the coordinator's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
