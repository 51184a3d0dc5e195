//! A router node: the `Router` service and Fabric's `orderer.AtomicBroadcast`
//! (`Broadcast`) served with `wire::server` (connection limits, bounded decoding) on one
//! listener, over one batcher link per shard.

use crate::broadcast::BroadcastService;
use crate::config::RouterConfig;
use crate::error::{Error, Result};
use crate::link::{BatcherLink, GrpcLink, LinkConfig};
use crate::service::RouterService;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use wire::node::Serving;
use wire::server::ServerLimits;

/// Where and how a router node serves.
#[derive(Debug, Clone)]
pub struct Config {
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
    /// Where the node makes its metrics (a detached registry unless the binary serves one).
    pub registry: telemetry::Registry,
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
        Deps {
            links,
            registry: telemetry::Registry::detached("router"),
        }
    }
}

/// A running router node.
pub struct Handle {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The service (for its in-flight counters).
    pub service: RouterService,
    serving: Serving,
}

impl wire::node::Node for Handle {
    type Error = Error;

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    async fn failed(&mut self) -> Result<()> {
        Ok(self.serving.ended().await?)
    }

    async fn stop(self) -> Result<()> {
        // Submit streams are long-lived: cut at once, as clients fail over to another router.
        self.serving.stop(std::time::Duration::ZERO).await;
        Ok(())
    }
}

/// Validates the config, binds the listener and serves until [`Handle`]'s `stop`.
pub async fn spawn(config: Config, deps: Deps) -> Result<Handle> {
    let service = RouterService::with_metrics(config.router, deps.links, &deps.registry)?;
    let listener = wire::node::bind(config.listen).await?;
    let svc = service.clone();
    let broadcast = BroadcastService::new(service.clone());
    let serving = wire::node::serve(listener, &config.server, |b| {
        b.add_service(svc.into_server())
            .add_service(broadcast.into_server())
    })?;
    Ok(Handle {
        addr: serving.addr(),
        service,
        serving,
    })
}
