//! The validator-committer as a node: `spawn(config, deps) -> Handle`. The binary only
//! reads the configuration file and registers metrics; opening the backend, creating the
//! schema, the engine and the gRPC service happen here.

use crate::config::{BackendOptions, VcConfig, open_backend};
use crate::metrics::Metrics;
use crate::service::{PipelineConfig, VcGrpc};
use crate::{Engine, EngineConfig, Error, Result};
use std::net::SocketAddr;
use std::sync::Arc;
use tracing::info;

/// What the node is given besides its configuration.
#[derive(Clone)]
pub struct Deps {
    /// Where it makes its metrics (a detached registry unless the binary serves one).
    pub registry: telemetry::Registry,
}

impl Default for Deps {
    fn default() -> Deps {
        Deps {
            registry: telemetry::Registry::detached("vcservice"),
        }
    }
}

/// A node's configuration: the service's own file, parsed ([`VcConfig::from_toml`]).
pub type Config = VcConfig;

/// A running validator-committer: a gRPC server only.
pub type Handle = wire::node::Server<Error>;

/// Opens the backend of `config` (creating the schema when missing), and serves the
/// `VcService` on `config.listen`.
pub async fn spawn(config: Config, deps: Deps) -> Result<Handle> {
    let mut db = config.db.clone();
    for extra in &config.extra_db_urls {
        db.push(',');
        db.push_str(extra);
    }
    let backend = open_backend(
        &db,
        &BackendOptions {
            pool_size: config.pool_size,
            tablets: config.tablets,
            durability: config.durability,
        },
    )?;
    backend.init_schema().await?;
    let metrics = Arc::new(Metrics::register(&deps.registry).map_err(|e| Error::Config {
        detail: e.to_string(),
    })?);
    let engine = Engine::new(backend, EngineConfig::default(), metrics.clone());
    let svc = VcGrpc::new(
        engine,
        PipelineConfig {
            workers: config.workers,
            queue: config.queue,
            max_in_flight: config.max_in_flight,
        },
        metrics,
    );
    let addr: SocketAddr = config.listen.parse().map_err(|_| Error::Config {
        detail: format!("listen address {:?} is not ip:port", config.listen),
    })?;
    let listen_error = |e: wire::node::ListenError| Error::Config {
        detail: e.to_string(),
    };
    let listener = wire::node::bind(addr).await.map_err(listen_error)?;
    // The incoming connections set TCP_NODELAY: small request/answer pairs must not wait
    // for Nagle's delay.
    let serving = wire::node::serve(listener, &config.server_limits(), |b| {
        b.add_service(svc.into_server())
    })
    .map_err(listen_error)?;
    let addr = serving.addr();
    info!(%addr, "vcservice listening");
    Ok(Handle::new(serving, wire::node::DEFAULT_GRACE))
}
