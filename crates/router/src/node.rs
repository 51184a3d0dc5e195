//! A router node: the `Router` service served with `wire::server` (connection limits,
//! bounded decoding) on one listener, over one batcher link per shard.

use crate::config::RouterConfig;
use crate::error::{Error, Result};
use crate::link::{BatcherLink, GrpcLink, LinkConfig};
use crate::metrics::Metrics;
use crate::service::RouterService;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wire::server::ServerLimits;

/// Where and how a router node serves.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The address to listen on (port 0: any free port, see [`Handle::addr`]).
    pub listen: SocketAddr,
    /// Connection-level limits.
    pub server: ServerLimits,
    /// The router itself.
    pub router: RouterConfig,
}

/// What a router node talks to.
pub struct Deps {
    /// One link per shard: `links[s]` reaches this party's batcher of shard `s`.
    pub links: Vec<Arc<dyn BatcherLink>>,
    /// Where the node records its metrics (`None`: nowhere).
    pub metrics: Option<Metrics>,
}

impl Deps {
    /// gRPC links to the batchers at `uris` (`uris[s]` for shard `s`), with the router's
    /// backoff and a pending bound of `shard_max_in_flight`. Needs a tokio runtime.
    pub fn grpc(router: &RouterConfig, uris: Vec<String>) -> Deps {
        let links = uris
            .into_iter()
            .zip(0u32..)
            .map(|(uri, shard)| {
                let link = GrpcLink::spawn(LinkConfig {
                    shard,
                    uri,
                    max_pending: router.shard_max_in_flight,
                    backoff: router.backoff,
                    connect_timeout: Duration::from_secs(5),
                });
                Arc::new(link) as Arc<dyn BatcherLink>
            })
            .collect();
        Deps { links, metrics: None }
    }
}

/// A running router node.
pub struct Handle {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The service (for its in-flight counters).
    pub service: RouterService,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::result::Result<(), tonic::transport::Error>>,
}

impl Handle {
    /// Stops serving and waits for the server to end.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

/// Validates the config, binds the listener and serves until [`Handle::shutdown`].
pub async fn spawn(config: NodeConfig, deps: Deps) -> Result<Handle> {
    let service = RouterService::with_metrics(config.router, deps.links, deps.metrics)?;
    let listen_error = |e: std::io::Error| Error::Listen {
        addr: config.listen,
        reason: e.to_string(),
    };
    let listener = TcpListener::bind(config.listen).await.map_err(listen_error)?;
    let addr = listener.local_addr().map_err(listen_error)?;
    let (incoming, _stats) = wire::server::incoming(listener, &config.server);
    let (tx, rx) = oneshot::channel();
    let server = wire::server::builder(&config.server).add_service(service.clone().into_server());
    let task = tokio::spawn(server.serve_with_incoming_shutdown(incoming, async {
        let _ = rx.await;
    }));
    Ok(Handle {
        addr,
        service,
        shutdown: Some(tx),
        task,
    })
}
