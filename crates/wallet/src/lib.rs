//! The token wallet (docs/token.md "The wallet"): `fabrx wallet` is its command line.
//!
//! - [`file`]: the wallet file — the owner's key, the tokens it knows, pending payments
//!   whose inputs are locked, and history — readable only by its owner, replaced
//!   atomically, one command at a time (a lock file);
//! - [`net`]: the network as a wallet sees it: endorsers, routers, the sidecar's
//!   notifications, the query service;
//! - [`ops`]: the commands: sync, balance, history, issue, transfer.
//!
//! A payment never double-spends by accident: its inputs stay locked from the moment its
//! envelope is written to the wallet file until its final status is known, across
//! restarts; a failure before anything reached the network leaves the file as it was.

pub mod file;
pub mod net;
pub mod ops;

pub use file::{Wallet, WalletFile};
pub use net::TokenNetwork;
pub use ops::{ABANDONED, Payment, PaymentOutcome};

/// Errors a wallet command reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The wallet file could not be read, written or locked.
    #[error("wallet file {path}: {detail}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// The wallet has not the funds.
    #[error("insufficient funds: {available} {token_type} available, {needed} needed{locked}")]
    InsufficientFunds {
        /// What is available (not locked).
        available: u64,
        /// What the payment needs.
        needed: u64,
        /// The type.
        token_type: String,
        /// A note on funds locked in pending payments.
        locked: String,
    },
    /// The payee's address is not an address.
    #[error("unknown address: {0}")]
    UnknownAddress(String),
    /// A bad argument.
    #[error("{0}")]
    Invalid(String),
    /// Fewer than t endorsers endorsed.
    #[error("endorsers below threshold: {endorsed} of the {threshold} needed endorsed ({detail})")]
    BelowThreshold {
        /// How many endorsed.
        endorsed: usize,
        /// How many are needed.
        threshold: usize,
        /// What the others said.
        detail: String,
    },
    /// The endorsers refused the payment for a reason every wallet should show.
    #[error("refused by the endorsers: {0}")]
    Refused(token::Rejection),
    /// The network could not be reached.
    #[error("network unreachable: {0}")]
    Unreachable(String),
    /// A payment like this one is still pending: paying again could pay twice.
    #[error(
        "a payment of {amount} {token_type} to {to} is still pending (tx {tx_id}): `sync` resolves it, `abandon --tx {tx_id}` cancels it; paying again now could pay twice"
    )]
    StillPending {
        /// The pending payment.
        tx_id: String,
        /// Its amount.
        amount: u64,
        /// Its type.
        token_type: String,
        /// Its payee.
        to: String,
    },
    /// The payment reached the network but its outcome is not known yet; its inputs stay
    /// locked and the next wallet command looks again.
    #[error("payment {tx_id} submitted, status not known yet ({detail}); its tokens stay locked until it is")]
    Unconfirmed {
        /// The tx id.
        tx_id: String,
        /// Why.
        detail: String,
    },
}

/// Result alias of the wallet.
pub type Result<T> = std::result::Result<T, Error>;
