//! An endorser as a process: its share, the namespace's public key set, the issuers and
//! the query services it reads through.

use crate::core::EndorserCore;
use crate::metrics::Metrics;
use crate::service::{EndorserService, ServiceConfig, StateReader};
use crate::{Error, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use token::Policy;

/// Everything an endorser node needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (`ip:port`; port 0 picks one).
    pub listen: SocketAddr,
    /// The key file of this endorser's share (a BLS key, `fabrx keygen` format).
    pub share_key: PathBuf,
    /// The share's index (1..n).
    pub share_index: u32,
    /// The namespace's threshold key set (threshold, group key, every share's key).
    pub public: crypto::ThresholdPublicKeys,
    /// The token namespace and its policy version.
    pub namespace: String,
    /// The namespace's policy version (0 when created).
    pub ns_version: u64,
    /// Who may issue.
    pub policy: Policy,
    /// Query service endpoints (`http://host:port`), tried in turn.
    pub query: Vec<String>,
    /// Serving limits.
    pub service: ServiceConfig,
}

/// What an endorser node may be handed.
pub struct Deps {
    /// Where it makes its metrics (a detached registry unless the binary serves one).
    pub registry: telemetry::Registry,
}

impl Default for Deps {
    fn default() -> Deps {
        Deps {
            registry: telemetry::Registry::detached("endorser"),
        }
    }
}

/// A running endorser: a gRPC server only.
pub type Handle = wire::node::Server<Error>;

/// Reads the share, checks it against the key set, binds the listener and serves.
pub async fn spawn(cfg: Config, deps: Deps) -> Result<Handle> {
    let key = crypto::read_key_file(&cfg.share_key)
        .map_err(|e| Error::Key(format!("{}: {e}", cfg.share_key.display())))?;
    let share = crypto::KeyShare::new(cfg.share_index, key).map_err(|e| Error::Key(e.to_string()))?;
    let core = EndorserCore::new(
        share,
        &cfg.public,
        cfg.namespace.clone(),
        cfg.ns_version,
        cfg.policy.clone(),
    )
    .map_err(Error::Key)?;
    let state = StateReader::new(&cfg.query).map_err(Error::Config)?;
    let listener = wire::node::bind(cfg.listen).await?;
    let limits = cfg.service.server;
    let service = EndorserService::new(core, state, cfg.service, Metrics::register(&deps.registry)?);
    let serving = wire::node::serve(listener, &limits, |b| b.add_service(service.into_server()))?;
    Ok(Handle::new(serving, wire::node::DEFAULT_GRACE))
}
