//! The validator-committer as a node: `spawn(config, deps) -> Handle`. The binary only
//! reads the configuration file and registers metrics; opening the backend, creating the
//! schema, the engine and the gRPC service happen here.

use crate::config::{BackendOptions, VcConfig, open_backend};
use crate::metrics::Metrics;
use crate::service::{PipelineConfig, VcGrpc};
use crate::{Engine, EngineConfig, Error, Result};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::info;

/// What the node is given besides its configuration.
#[derive(Clone, Default)]
pub struct Deps {
    /// Metrics to report to (registered by the caller); none: unexported.
    pub metrics: Option<Arc<Metrics>>,
}

/// A running validator-committer.
pub struct Handle {
    /// The address the service listens on (the configured one, with a port 0 resolved).
    pub addr: SocketAddr,
    server: JoinHandle<std::result::Result<(), tonic::transport::Error>>,
    stop: oneshot::Sender<()>,
}

impl Handle {
    /// Waits until the server fails (it never ends on its own).
    pub async fn failed(&mut self) -> Result<()> {
        let r = (&mut self.server).await.map_err(|e| Error::Config {
            detail: format!("vcservice server task: {e}"),
        })?;
        r.map_err(|e| Error::Config {
            detail: format!("vcservice server: {e}"),
        })
    }

    /// Stops accepting calls and waits for the server to finish.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
    }
}

/// Opens the backend of `config` (creating the schema when missing), and serves the
/// `VcService` on `config.listen`.
pub async fn spawn(config: VcConfig, deps: Deps) -> Result<Handle> {
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
    let engine = Engine::new(backend, EngineConfig::default(), deps.metrics.clone());
    let svc = VcGrpc::new(
        engine,
        PipelineConfig {
            workers: config.workers.get(),
            queue: config.queue.get(),
            max_in_flight: config.max_in_flight.get(),
        },
        deps.metrics,
    );
    let addr: SocketAddr = config.listen.parse().map_err(|_| Error::Config {
        detail: format!("listen address {:?} is not ip:port", config.listen),
    })?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Config {
            detail: format!("listen {addr}: {e}"),
        })?;
    let addr = listener.local_addr().map_err(|e| Error::Config {
        detail: format!("listen {addr}: {e}"),
    })?;
    info!(%addr, "vcservice listening");
    let (stop, stopped) = oneshot::channel::<()>();
    let limits = config.server_limits();
    // The incoming connections set TCP_NODELAY: small request/answer pairs must not wait
    // for Nagle's delay.
    let (incoming, _stats) = wire::server::incoming(listener, &limits);
    let server = tokio::spawn(
        wire::server::builder(&limits)
            .add_service(svc.into_server())
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            }),
    );
    Ok(Handle { addr, server, stop })
}
