//! The signature verifier as a node: `spawn(config, deps) -> Handle` (the contract every
//! role follows, `wire::node`). Stateless: it holds no file and needs no peer.

use crate::metrics::Metrics;
use crate::service::{ServiceConfig, VerifierService};
use crate::{Error, Result, Verifier};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use tracing::info;

/// Where and how a verifier node serves.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// The address to listen on (port 0: any free port, see [`Handle::addr`]).
    pub listen: SocketAddr,
    /// Verification threads (`None`: one per available core).
    pub threads: Option<NonZeroUsize>,
    /// Per-stream and total bounds, and the server's connection limits.
    pub service: ServiceConfig,
}

/// What a verifier node may be handed.
pub struct Deps {
    /// Where it makes its metrics (a detached registry unless the binary serves one).
    pub registry: telemetry::Registry,
}

impl Default for Deps {
    fn default() -> Deps {
        Deps {
            registry: telemetry::Registry::detached("sigverifier"),
        }
    }
}

/// A running verifier node: a gRPC server only.
pub type Handle = wire::node::Server<Error>;

/// Starts the verification threads, binds the listener and serves `SigVerifier`.
pub async fn spawn(config: Config, deps: Deps) -> Result<Handle> {
    let verifier = Verifier::new(config.threads.map_or(0, NonZeroUsize::get))?;
    let threads = verifier.threads();
    let listener = wire::node::bind(config.listen).await?;
    // Made once the listener is bound: a caller may try the next address with the same
    // registry when binding fails.
    let metrics = Arc::new(Metrics::register(&deps.registry)?);
    let service = VerifierService::new(verifier, config.service, metrics);
    let serving = wire::node::serve(listener, &config.service.server, |b| {
        b.add_service(service.into_server())
    })?;
    let addr = serving.addr();
    info!(%addr, threads, "sigverifier listening");
    Ok(Handle::new(serving, wire::node::DEFAULT_GRACE))
}
