//! The pure core of the committer's coordinator: the transaction dependency graph
//! (FX §3.3-3.4).
//!
//! Blocks arrive in order. Each block's local graph is built on its own (possibly in
//! parallel, [`build_parallel`]) and merged into the global [`DependencyGraph`], which
//! releases a tx once every earlier tx it conflicts with (write-read, read-write or
//! write-write on a key, including the implicit read of `(_meta, ns)`) has finished.
//! Released txs never conflict with each other, so the sigverifiers and vcservices may
//! process them in any order and concurrently. See `docs/coordinator.md`.
//!
//! Txs already decided upstream (malformed, duplicate id) are not given to the graph:
//! they touch no state, so nothing can depend on them. Heights may therefore have gaps.
//!
//! ```
//! use coordinator::{DependencyGraph, GraphConfig};
//! use std::sync::Arc;
//! use types::{BlockTx, Height, Status, Tx, TxNamespace, Write};
//!
//! let write = |key: &[u8]| {
//!     let ns = TxNamespace {
//!         ns_id: "token".into(),
//!         blind_writes: vec![Write { key: key.to_vec(), value: vec![1] }],
//!         ..TxNamespace::default()
//!     };
//!     Arc::new(Tx { namespaces: vec![ns], ..Tx::default() })
//! };
//! let mut graph = DependencyGraph::new(GraphConfig::default());
//! let block = vec![
//!     BlockTx::new("t0".into(), Height::new(0, 0), write(b"k")),
//!     BlockTx::new("t1".into(), Height::new(0, 1), write(b"k")), // write-write conflict with t0
//! ];
//! let ready = graph.add_block(0, block).unwrap();
//! assert_eq!(ready.len(), 1);
//! assert_eq!(ready[0].height, Height::new(0, 0));
//! // Committed or aborted, a finished tx no longer holds back later txs.
//! let ready = graph.complete(Height::new(0, 0), Status::Committed).unwrap();
//! assert_eq!(ready[0].id.as_str(), "t1");
//! ```

mod error;
mod graph;
mod index;
mod key;
mod local;

pub use error::{Error, Result};
pub use graph::{DependencyGraph, GraphConfig, GraphStats, Input, Released};
pub use key::KeyHasher;
pub use local::{BlockTx, LocalGraph, build_parallel};
