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
//! * [`replica`] — wires a replica of the plain BFT cluster (`fabrx node bft`: ordering
//!   opaque requests, for tests and measurements of the engine alone).
//! * [`application`] — the Arma application (BAFs, complaints, terms, block headers).
//! * [`node`] — the consenter node running it (`fabrx node consenter`), with
//!   [`arma_log`] (its decisions log and state snapshot), [`decisions_service`]
//!   (`Consenter.Decisions`) and [`decision_wire`] (decisions on the wire and
//!   [`decision_wire::verify_pb_decision`] for their receivers); docs/consenter.md.
//! * [`metrics`] — what the Arma node's decisions writer records (`fabrx_consenter_*`).

pub mod application;
pub mod arma_log;
pub mod codec;
pub mod decision_wire;
pub mod decisions;
pub mod decisions_service;
pub mod epoch;
mod error;
pub mod keys;
pub mod metrics;
pub mod node;
pub mod peers;
pub mod replica;
pub mod service;
pub mod submit;
pub mod transport;

pub use error::{Error, Result};
