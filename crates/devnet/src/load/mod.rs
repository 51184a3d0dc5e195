//! `fabrx loadgen --target network`, `--target sink`, `--target mock-orderer` and
//! `--target committer` as library code: what the load generator does with a network
//! directory (or a sink, or an in-process committer) around the drivers of the `loadgen`
//! crate. The binary fills an `Options` from its flags, calls `run`, prints the events it
//! is told of and the summary line.
//!
//! * [`network`] — a running network (`fabrx up`): its endpoints, the genesis through
//!   the routers, one instance's share of a load spread over several processes, the
//!   padding for a tx size, the run, its summary and its `raw.json`; the load's own
//!   metrics and `/rate` control.
//! * [`mock`] — the committing party of `fabrx up --no-orderer`: the workload's blocks
//!   signed by a quorum of the network's consenters, served to its sidecar, the summary.
//! * [`sink`] — `loadgen::sink` in another process, over mutual TLS: the load client's
//!   own cost, template txs, the summary with the sink's CPU.
//! * [`committer`] — the committer pipeline in this process, the load generator as its
//!   orderer: the database, the paced run, the summary, the serial oracle, the baselines.

pub mod committer;
pub mod mock;
pub mod network;
pub mod sink;

mod metrics;

use std::path::{Path, PathBuf};

/// Why a load run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The options contradict each other or the network (names the flag).
    #[error("{0}")]
    Usage(String),
    /// The network config could not be read.
    #[error("loading the network config {}", path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// Why.
        #[source]
        source: netconfig::Error,
    },
    /// The network config lacks something the load needs, or its keys and TLS files
    /// could not be used.
    #[error(transparent)]
    Network(#[from] netconfig::Error),
    /// The network's administrator key (it endorses the `_meta` tx) could not be read.
    #[error("reading the network's administrator key {}", path.display())]
    MetaKey {
        /// The key file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crypto::CryptoError,
    },
    /// `network.json` could not be read: no network was started in the directory.
    #[error("reading {} (is the network up?)", path.display())]
    NotUp {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `network.json` does not parse.
    #[error("network.json does not parse")]
    Listing(#[source] serde_json::Error),
    /// One instance's share of the load is not a valid load.
    #[error("{what}")]
    Share {
        /// Which part of the share.
        what: String,
        /// Why.
        #[source]
        source: loadgen::Error,
    },
    /// A genesis tx ended with another status than `COMMITTED`.
    #[error("genesis tx {id} ended {status}, expected COMMITTED")]
    GenesisStatus {
        /// The tx id.
        id: String,
        /// Its status.
        status: String,
    },
    /// A genesis tx got no status in time.
    #[error("genesis tx {id} was not confirmed within 60 s (routers: {routers:?})")]
    GenesisUnconfirmed {
        /// The tx id.
        id: String,
        /// The routers' refusals, by reason.
        routers: std::collections::BTreeMap<String, u64>,
    },
    /// A temporary directory for a fresh embedded store could not be made.
    #[error("creating a temporary directory for the embedded store")]
    TempDir(#[source] std::io::Error),
    /// The database could not be named or opened.
    #[error(transparent)]
    Backend(#[from] vcservice::Error),
    /// The database's schema could not be created.
    #[error("creating the schema")]
    Schema(#[source] vcservice::Error),
    /// The workload, the driver or the mock orderer failed.
    #[error(transparent)]
    Load(#[from] loadgen::Error),
    /// The load's metrics could not be made or served.
    #[error(transparent)]
    Metrics(#[from] telemetry::Error),
    /// A file of the report could not be written.
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A summary or `raw.json` could not be encoded.
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
    /// A count does not fit the machine's word.
    #[error(transparent)]
    Range(#[from] std::num::TryFromIntError),
    /// A blocking task (planning, signing, the oracle) did not finish.
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
}

/// Result alias of the module.
pub type Result<T> = std::result::Result<T, Error>;

/// The network config of `dir`, with the client TLS identity installed: the routers,
/// the sidecar and the assemblers authorize their callers by it.
fn network_config(dir: &Path) -> Result<netconfig::NetworkConfig> {
    let path = netconfig::config_path(dir);
    let config = netconfig::NetworkConfig::load(&path).map_err(|source| Error::Config { path, source })?;
    config.install_client_tls(dir)?;
    Ok(config)
}

/// The network's administrator key, which endorses the `_meta` tx of the genesis.
fn meta_key(dir: &Path) -> Result<crypto::SigningKey> {
    let path = netconfig::meta_key_path(dir);
    crypto::read_key_file(&path).map_err(|source| Error::MetaKey { path, source })
}

/// `n` per second of `seconds`, to 0.1 (none in no time: 0).
fn per_second(n: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        (n as f64 / seconds * 10.0).round() / 10.0
    } else {
        0.0
    }
}

/// Seconds to the millisecond.
fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// The summary's JSON line: its fields in the order of their names (as a JSON object
/// of this project always printed them).
fn line(summary: &impl serde::Serialize) -> Result<String> {
    Ok(serde_json::to_value(summary)?.to_string())
}
