//! The query service as a node: `spawn(config, deps) -> Handle`. The binary (`fabrx node
//! query`) builds a [`Config`], installs TLS when the network has it (the server then
//! authenticates callers and authorizes them by role: `wire::tls::allowed`), calls
//! [`spawn`] and prints its ready line with [`Handle::addr`].

use crate::reads::ReadPolicy;
use crate::service::QueryService;
use crate::upstream::{UpstreamConfig, VcUpstream};
use crate::{Error, Result};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tracing::info;
use wire::server::ServerLimits;

/// Bounds of the query service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLimits {
    /// Requests forwarded at once; more wait for a turn.
    pub max_concurrent: NonZeroUsize,
    /// A request waiting longer than this for its turn is refused `RESOURCE_EXHAUSTED`.
    pub queue_timeout: Duration,
    /// A vcservice call without an answer within this time counts as failed (the next
    /// endpoint is tried).
    pub call_timeout: Duration,
    /// Time allowed to connect to a vcservice.
    pub connect_timeout: Duration,
}

impl Default for QueryLimits {
    fn default() -> Self {
        let upstream = UpstreamConfig::default();
        QueryLimits {
            max_concurrent: NonZeroUsize::new(64).unwrap_or(NonZeroUsize::MIN),
            queue_timeout: Duration::from_secs(2),
            call_timeout: upstream.call_timeout,
            connect_timeout: upstream.connect_timeout,
        }
    }
}

/// Where and how a query node serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The address to listen on (port 0: any free port, see [`Handle::addr`]).
    pub listen: SocketAddr,
    /// This party's vcservice endpoints (`host:port` or `http://host:port`), at least one;
    /// tried in turn when one does not answer.
    pub vcservices: Vec<String>,
    /// Request bounds and timeouts.
    pub limits: QueryLimits,
    /// Connection-level limits of the server.
    pub server: ServerLimits,
    /// Who may read whose tokens.
    pub reads: ReadPolicy,
}

impl Config {
    /// A configuration with the default limits.
    pub fn new(listen: SocketAddr, vcservices: Vec<String>) -> Config {
        Config {
            listen,
            vcservices,
            limits: QueryLimits::default(),
            server: ServerLimits::default(),
            reads: ReadPolicy::default(),
        }
    }
}

/// What a query node may be handed.
pub struct Deps {
    /// Where it makes its metrics (`fabrx_query_*`; a detached registry unless the
    /// binary serves one).
    pub registry: telemetry::Registry,
}

impl Default for Deps {
    fn default() -> Deps {
        Deps {
            registry: telemetry::Registry::detached("query"),
        }
    }
}

/// A running query node: a gRPC server only.
pub type Handle = wire::node::Server<Error>;

/// Validates `config`, binds the listener and serves `fabrx.v1.Query` until the
/// handle's `stop`. Connections to the vcservices open on the first request, so the
/// node starts even while they are down (requests then fail `UNAVAILABLE`).
pub async fn spawn(config: Config, deps: Deps) -> Result<Handle> {
    let upstream = VcUpstream::new(
        &config.vcservices,
        UpstreamConfig {
            call_timeout: config.limits.call_timeout,
            connect_timeout: config.limits.connect_timeout,
        },
    )?;
    let metrics = crate::metrics::Metrics::register(&deps.registry)?;
    let service = QueryService::new(
        Arc::new(upstream),
        config.limits.max_concurrent,
        config.limits.queue_timeout,
        metrics,
    )
    .with_reads(config.reads.clone());
    let listen_error = |e: wire::node::ListenError| Error::Listen {
        addr: e.addr,
        reason: e.reason,
    };
    let listener = wire::node::bind(config.listen).await.map_err(listen_error)?;
    let serving = wire::node::serve(listener, &config.server, |b| b.add_service(service.into_server()))
        .map_err(listen_error)?;
    let addr = serving.addr();
    info!(%addr, vcservices = config.vcservices.len(), tls = wire::tls::installed().is_some(), "query listening");
    Ok(Handle::new(serving, wire::node::DEFAULT_GRACE))
}
