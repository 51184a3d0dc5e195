//! Each role's config from the network config: what `fabrx node <role> --network … --party
//! P` builds before it starts. Every file here adds to [`crate::NetworkConfig`]; the
//! config itself never reads them, so the sections stay leaves of the crate.
//!
//! * [`ordering`] — routers, batchers, consenters, assemblers;
//! * [`committer`] — a party's committer nodes and its sidecar's block source;
//! * [`token`] — endorsers, query services, the token namespace's policy;
//! * [`tls`] — the TLS identity a node or client installs.

pub mod committer;
pub mod ordering;
pub mod tls;
pub mod token;

pub use ordering::{ArmaConsenterPaths, ConsenterPaths, RouterSetup};
