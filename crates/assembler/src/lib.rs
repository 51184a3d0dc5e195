//! Arma assembler (docs/assembler.md), one per party: follows the consenters' verified
//! decisions, joins each ordered header with its batch (prefetched from the party's own
//! batchers into an index bounded in bytes, else fetched from any batcher of the shard
//! and checked against the header's digest), appends the block to the party's ledger and
//! serves the ledger on a `Deliver` stream.
//!
//! * [`core`] — the pure state machine (decisions and batches in, blocks out);
//! * [`store`] — the block ledger (`crates/ledger`) with the encoded blocks;
//! * [`node`] — the tokio node: decision follower, batch prefetch and fetch, the
//!   `Assembler.Deliver` service;
//! * [`fabric_deliver`] — Fabric's `orderer.AtomicBroadcast/Deliver` over the ledger
//!   (the genesis config block, then one Fabric block per ledger block);
//! * [`metrics`] — what the node records (`fabrx_assembler_*`).

pub mod core;
pub mod deliver;
pub mod fabric_deliver;
pub mod metrics;
pub mod node;
pub mod store;
