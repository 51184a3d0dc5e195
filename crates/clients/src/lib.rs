//! Typed clients of fabrx services, over the messages of `wire`: what a role uses to call
//! another role. A client multiplexes, reconnects and matches answers to calls; it makes
//! no protocol decisions (those stay in the role that calls it).
//!
//! - [`channel`]: the one way to open a channel to a service;
//! - [`retry`]: the one retry classification (which answers are worth another attempt);
//! - [`failover`]: one call over several equivalent endpoints;
//! - [`decisions`]: whether another consenter is ahead of the one a follower reads;
//! - [`verifier`]: the `SigVerifier.Verify` stream, multiplexed by request id.

pub mod channel;
pub mod decisions;
pub mod deliver;
pub mod failover;
pub mod file;
pub mod retry;
pub mod verifier;

pub use failover::{Failover, FailoverError, Order};
pub use verifier::{ClientConfig, ClientError, VerifierClient};
