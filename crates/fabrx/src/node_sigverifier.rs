//! `fabrx node sigverifier`: the stateless signature verifier (docs/sigverifier.md).

use anyhow::Context;
use clap::Args;
use sigverifier::service::ServiceConfig;
use std::num::NonZeroUsize;
use tracing::info;

/// Arguments of `fabrx node sigverifier`.
#[derive(Debug, Args)]
pub struct SigverifierArgs {
    /// gRPC listen address (`host:port`; port 0 picks a free port, logged at start).
    #[arg(long)]
    listen: String,
    /// Verification threads (0 = one per available core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// The network config file: authenticate with party `--party`'s sigverifier
    /// certificate and serve only its sidecar (mutual TLS; nothing for a network without).
    #[arg(long, requires = "party", value_name = "FILE", value_parser = crate::server_args::network_file)]
    network: Option<std::path::PathBuf>,
    /// The party (1..N), with `--network`.
    #[arg(long, requires = "network")]
    party: Option<u32>,
    /// Prometheus `/metrics` listen address (off when absent).
    #[arg(long)]
    metrics: Option<String>,
    /// Batches of one stream verified or queued at once.
    #[arg(long, default_value_t = ServiceConfig::default().max_in_flight, value_parser = crate::server_args::positive_usize)]
    max_in_flight: NonZeroUsize,
    /// Batches of all streams together verified or queued at once.
    #[arg(long, default_value_t = ServiceConfig::default().max_in_flight_total, value_parser = crate::server_args::positive_usize)]
    max_in_flight_total: NonZeroUsize,
    #[command(flatten)]
    server: crate::server_args::ServerArgs,
}

/// Runs the verifier until Ctrl-C. Once listening it prints one JSON line to stdout:
/// `{"ready":"sigverifier","listen":"ip:port"}`.
pub async fn run(args: SigverifierArgs) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    if let (Some(path), Some(party)) = (&args.network, args.party) {
        let config = netconfig::NetworkConfig::load(path)
            .with_context(|| format!("loading the network config {}", path.display()))?;
        config.install_tls(path, wire::tls::Role::Sigverifier, party, None)?;
    }
    // The `party` label when the verifier serves a network's party.
    let labels: Vec<(&str, u32)> = args.party.map(|p| ("party", p)).into_iter().collect();
    let registry = crate::runner::metrics("sigverifier", args.metrics.as_deref(), &labels).await?;
    let service = ServiceConfig {
        max_in_flight: args.max_in_flight,
        max_in_flight_total: args.max_in_flight_total,
        server: args.server.limits(),
        ..ServiceConfig::default()
    };
    // A name may resolve to several addresses (`localhost`: IPv4 and IPv6): the first
    // that binds serves.
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(&args.listen)
        .await
        .with_context(|| format!("resolving {}", args.listen))?
        .collect();
    let mut last_error = None;
    let mut started = None;
    for listen in addrs {
        let config = sigverifier::node::Config {
            listen,
            threads: NonZeroUsize::new(args.threads),
            service,
        };
        let deps = sigverifier::node::Deps {
            registry: registry.clone(),
        };
        match sigverifier::node::spawn(config, deps).await {
            Ok(node) => {
                started = Some(node);
                break;
            }
            Err(e) => last_error = Some(e),
        }
    }
    let node = match (started, last_error) {
        (Some(node), _) => node,
        (None, Some(e)) => return Err(e).context("starting the sigverifier"),
        (None, None) => anyhow::bail!("{} names no address", args.listen),
    };
    info!(addr = %node.addr, "sigverifier listening");
    let ready = serde_json::json!({ "ready": "sigverifier", "listen": node.addr.to_string() });
    crate::runner::serve(node, "the sigverifier", Some(ready), &mut stopping).await
}
