//! Domain model of fabrx: transactions, namespaces, statuses, digests, shard mapping,
//! quorum math and the structural checks of a transaction.
//!
//! Everything here is pure: no I/O, no clock, no runtime. Protobuf types live in the
//! `wire` crate and convert into these types at the edge.

pub mod block;
pub mod check;
pub mod digest;
pub mod endorsement;
pub mod error;
pub mod height;
pub mod owned;
pub mod policy;
pub mod quorum;
pub mod status;
pub mod tags;
pub mod tx;
pub mod txid;

pub use block::{BatchId, Block, BlockHeader, BlockMetadata, BlockTx, PartyId, ShardId, TxOutcome, VcTx};
pub use error::{Error, Result};
pub use height::Height;
pub use policy::{NamespacePolicy, PolicyScheme};
pub use quorum::Quorum;
pub use status::Status;
pub use tx::{Endorsement, Read, ReadWrite, Tx, TxId, TxNamespace, Write};

/// The system namespace that holds namespace policies (FX §3.5).
pub const META_NAMESPACE: &str = "_meta";
