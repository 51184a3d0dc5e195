//! The network config: what every ordering node of a fabrx network reads
//! (`docs/network-config.md`). One shared JSON file lists the parties 1..N, the shards
//! 0..S−1, every node's endpoint, the public keys of the nodes that sign (consenters, and
//! batchers: one key per party and shard), and the batching, consensus and router
//! parameters. Private keys stay in per-node key files (`crypto::keyfile`, mode 0600).
//!
//! * [`file`](mod@file) — the JSON form, as written and read (`NetworkFile`, parameter blocks with
//!   their defaults).
//! * [`config`] — [`NetworkConfig`]: the file validated once ([`NetworkConfig::load`]).
//! * [`roles`] — each role's config from it (`router_setup`, `batcher_config`,
//!   `consenter_node_config`, …).
//! * [`generate`](mod@generate) — writing a new network's config and key files
//!   (`fabrx network generate`).
//! * [`fabric`] — what a Fabric client is given: each party's MSP, the genesis config
//!   block, `armageddon` user configs (docs/fabric.md).
//! * [`topology`] — the network's processes, listed once (what `fabrx up` starts).
//! * [`update`] — a config update (`ConfigUpdate`): the whole next config and the parties'
//!   admin signatures on it, proposed, signed, merged and validated against the config in
//!   force (`fabrx network update`, docs/reconfiguration.md).
//! * [`k8s`] — the same network laid out for Kubernetes: service DNS names, one
//!   namespace and one Secret per party (`fabrx network generate --k8s`).
//!
//! This crate depends on the role crates (router, batcher, consenter, bft) to produce their
//! configs; they never depend on it, so each role stays usable without the file.

pub mod committer;
pub mod config;
pub mod endpoint;
mod error;
pub mod fabric;
pub mod file;
pub mod generate;
pub mod in_force;
pub mod join;
pub mod k8s;
mod params;
pub mod roles;
pub mod tls;
pub mod token;
pub mod topology;
pub mod update;

pub use committer::{CommitterParty, Committers, committer_port, meta_key_path};
pub use config::{BatcherNode, NetworkConfig, Party, client_identity};
pub use endpoint::Endpoint;
pub use error::{Error, Node, Result};
pub use file::NetworkFile;
pub use generate::{
    GenerateSpec, Generated, admin_key_path, config_path, generate, key_file_path, peer_keys_path,
};
pub use roles::{ArmaConsenterPaths, ConsenterPaths, RouterSetup};
pub use token::{EndorserNode, TokenApp, endorser_key_path, issuer_key_path};
pub use topology::Process;
pub use update::{ConfigUpdate, UpdateError};
