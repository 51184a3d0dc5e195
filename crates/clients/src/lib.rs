//! Typed clients of fabrx services, over the messages of `wire`: what a role uses to call
//! another role. A client multiplexes, reconnects and matches answers to calls; it makes
//! no protocol decisions (those stay in the role that calls it).
//!
//! - [`verifier`]: the `SigVerifier.Verify` stream, multiplexed by request id.

pub mod verifier;

pub use verifier::{ClientConfig, ClientError, VerifierClient};
