//! `fabrx node endorser`: one token endorser (crates/endorser, docs/token.md), configured
//! from the network config file.

use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use tracing::info;

/// Arguments of `fabrx node endorser`.
#[derive(Debug, Args)]
pub struct EndorserArgs {
    /// The network config file (`<dir>/config/network-config.json`); the share's key file
    /// is read from `<dir>/keys/endorsers/endorser-<index>.key`.
    #[arg(long = "network", visible_alias = "config", value_name = "FILE", value_parser = crate::server_args::network_file)]
    config: PathBuf,
    /// The endorser's share index (1..n).
    #[arg(long)]
    index: u32,
    /// Listen address (`ip:port`; port 0 picks one). Default: its endpoint in the config.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Prometheus `/metrics` listen address (off when absent).
    #[arg(long)]
    metrics: Option<String>,
    /// Requests checked and signed at once.
    #[arg(long, default_value_t = endorser::service::ServiceConfig::default().max_in_flight, value_parser = crate::server_args::positive_usize)]
    max_in_flight: std::num::NonZeroUsize,
    #[command(flatten)]
    server: crate::server_args::ServerArgs,
}

/// Serves until SIGTERM or Ctrl-C. Once listening it prints one JSON line to stdout:
/// `{"ready":"endorser","index":I,"listen":"ip:port"}`.
pub async fn run(args: EndorserArgs) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    let config = netconfig::NetworkConfig::load(&args.config)
        .with_context(|| format!("loading the network config {}", args.config.display()))?;
    let me = config.endorser(args.index)?.clone();
    config.install_tls(
        &args.config,
        wire::tls::Role::Endorser,
        me.party,
        Some(args.index),
    )?;
    let dir = netconfig::tls::network_dir(&args.config);
    let mut cfg = config.endorser_node_config(&dir, args.index, args.listen)?;
    cfg.service.max_in_flight = args.max_in_flight;
    cfg.service.server = args.server.limits();
    // The `party` label: the party the network config gives this share.
    let registry =
        crate::runner::metrics("endorser", args.metrics.as_deref(), &[("party", me.party)]).await?;
    let node = endorser::node::spawn(cfg, endorser::node::Deps { registry })
        .await
        .with_context(|| format!("starting endorser {}", args.index))?;
    info!(index = args.index, addr = %node.addr, "endorser listening");
    let ready =
        serde_json::json!({ "ready": "endorser", "index": args.index, "listen": node.addr.to_string() });
    let what = format!("endorser {}", args.index);
    crate::runner::serve(node, &what, Some(ready), &mut stopping).await
}
