//! Arma router (docs/ARCHITECTURE.md "One transaction, end to end"; `docs/router.md`): a client
//! stream service that checks each request, maps it to its shard and forwards it to its
//! own party's batcher of that shard, acking the client only once the batcher admitted it.
//!
//! The deciding logic is pure (no tokio): [`admission`] (the checks of one request),
//! [`inflight`] (per-shard bounds of forwarded, unanswered requests), [`backoff`] (the
//! reconnect schedule), [`answer`] (what a batcher answers and the gRPC code a client
//! sees) and [`fabric_answer`] (the Fabric status a `Broadcast` client sees). The shells
//! are [`service`] (the tonic `Router` service), [`broadcast`] (Fabric's
//! `orderer.AtomicBroadcast` over the same pipeline), [`link`] (the
//! [`link::BatcherLink`] seam and its gRPC implementation) and [`node`] (serving them);
//! [`metrics`] records what they see.

pub mod admission;
pub mod answer;
pub mod backoff;
pub mod broadcast;
pub mod config;
pub mod config_updates;
pub mod error;
pub mod fabric_answer;
pub mod inflight;
pub mod link;
pub mod metrics;
pub mod node;
pub mod refusal;
pub mod service;
mod spawned;

pub use admission::{Admitted, Refusal, RequestDigest, check_request};
pub use answer::{BatcherAnswer, BatcherRefusal};
pub use backoff::Backoff;
pub use config::{
    ClientAuth, ClientKeys, FabricAuth, FabricClients, RequestFormat, RequestPolicy, RouterConfig,
};
pub use error::{Error, Result};
