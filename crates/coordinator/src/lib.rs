//! The pure core of the committer's coordinator: the transaction dependency graph
//! (FX §3.3-3.4).
//!
//! Blocks arrive in order. Each block's local graph is built on its own (possibly in
//! parallel, [`build_parallel`]) and merged into the global [`DependencyGraph`], which
//! releases a tx once every earlier tx it conflicts with (write-read, read-write or
//! write-write on a key, including the implicit read of `(_meta, ns)`) has finished.
//! Released txs never conflict with each other, so the sigverifiers and vcservices may
//! process them in any order and concurrently. See `docs/coordinator.md`.

mod error;
mod graph;
mod index;
mod key;
mod local;

pub use error::{Error, Result};
pub use graph::{DependencyGraph, GraphConfig, GraphStats, Released};
pub use key::KeyHasher;
pub use local::{BlockTx, LocalGraph, build_parallel};
