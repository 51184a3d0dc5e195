//! A consenter node: the BFT engine (`bft`) run as a process, with a signed gRPC
//! transport between replicas, a client submit endpoint, a status endpoint, the
//! engine's file WAL and a decisions log.
//!
//! * [`codec`] — engine messages ↔ `wire::pb` (proto `fabrx/v1/consensus.proto`).
//! * [`keys`] — key derivation, engine signer/verifier over crates/crypto, signed
//!   envelopes.
//! * [`transport`] — outgoing: bounded drop-oldest queue and reconnecting stream per peer.
//! * [`service`] — incoming: verify-then-decode, submit, status.
//! * [`decisions`] — the test application's decisions log.
//! * [`node`] — wires it all up (`fabrx node bft`).
//!
//! The Arma consenter logic (BAFs, complaints, block headers) is not here yet; it
//! will plug in as the engine's `Application`.

pub mod arma;
pub mod codec;
pub mod decisions;
pub mod epoch;
mod error;
pub mod keys;
pub mod node;
pub mod service;
pub mod submit;
pub mod transport;

pub use error::{Error, Result};
