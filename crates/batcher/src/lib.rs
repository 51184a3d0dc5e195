//! Arma batcher, the pure core (Arma §4.3; docs/batcher.md).
//!
//! One [`Batcher`] per party and shard. It admits its router's requests into a bounded,
//! deduplicated mempool; as the shard's primary it cuts batches (count, bytes, timeout)
//! within a window of unconfirmed batches, has them persisted and signs a BAF for each; as
//! a secondary it pulls the primary's batches, verifies them, has them persisted and signs
//! a BAF and an ack, forwards requests the primary ignores and complains about a
//! censoring or lying primary. Terms and ordered batches are learned from the consenters'
//! decisions.
//!
//! No I/O in the core: `Batcher::handle(Input) -> Vec<Output>`; the shell ([`node`],
//! feature `shell`) executes outputs in order, persists batches and feeds back time,
//! pulls and decisions.
//!
//! * `core.rs` — state, inputs, outputs, admission, terms, ordered and persisted batches.
//! * `primary.rs` — cutting batches and counting acks.
//! * `secondary.rs` — verifying pulled batches, forwarding, complaints.
//! * `mempool.rs` — the pending queue and the memory of ordered requests.
//! * batches, BAFs, complaints, their signed bytes and their wire form: the shared `arma`
//!   crate.
//! * [`compact`] — compact batches: request digests in place of the requests.
//! * [`codec`] — the consenter request a batcher submits (`ConsenterRequest`), its bytes
//!   and their decoding, over the `arma` conversions.
//! * [`node`] (feature `shell`) — the networked node: gRPC services and clients, the
//!   batch store, the decision follower.

pub mod codec;
pub mod compact;
mod config;
mod core;
mod error;
mod mempool;
/// The messages batchers exchange and sign live in the shared `arma` crate.
mod messages {
    pub use arma::{Baf, BatchHeader, Complaint, ComplaintReason, Request, RequestDigest, SignedBatch};
}
#[cfg(feature = "shell")]
pub mod node;
mod primary;
mod secondary;

pub use crate::compact::CompactBatch;
pub use crate::core::{Batcher, Input, Output, RefuseReason, TermInfo};
pub use config::{Config, primary_of};
pub use error::{Error, Result};
pub use messages::{Baf, BatchHeader, Complaint, ComplaintReason, Request, RequestDigest, SignedBatch};
pub use secondary::verify_batch;
