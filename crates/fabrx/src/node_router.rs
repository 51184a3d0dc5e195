//! `fabrx node router`: party P's router (crates/router, docs/router.md), configured from
//! the network config file (docs/network-config.md).

use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use tracing::info;

/// Arguments of `fabrx node router`.
#[derive(Debug, Args)]
pub struct RouterArgs {
    /// The network config file (`fabrx network generate` writes
    /// `<dir>/config/network-config.json`).
    #[arg(long)]
    config: PathBuf,
    /// This router's party (1..N).
    #[arg(long)]
    party: u32,
    /// Listen address (`ip:port`; port 0 picks a free port, printed in the ready line).
    /// Default: the party's router endpoint in the config (every interface when it
    /// names a host rather than an IP).
    #[arg(long)]
    listen: Option<SocketAddr>,
    #[command(flatten)]
    server: crate::server_args::ServerArgs,
}

/// Serves until SIGTERM or Ctrl-C. Once listening it prints one JSON line to stdout:
/// `{"ready":"router","party":P,"listen":"ip:port","shards":S}`.
pub async fn run(args: RouterArgs) -> anyhow::Result<()> {
    let config = netconfig::NetworkConfig::load(&args.config)
        .with_context(|| format!("loading the network config {}", args.config.display()))?;
    crate::tls_setup::install(&config, &args.config, wire::tls::Role::Router, args.party, None)?;
    let mut setup = config.router_setup(args.party, args.listen)?;
    setup.node.server = args.server.limits();
    let deps = router::node::Deps::grpc(&setup.node.router, setup.batcher_uris.clone());
    let shards = setup.node.router.shards;
    let node = router::node::spawn(setup.node, deps)
        .await
        .with_context(|| format!("starting party {}'s router", args.party))?;
    info!(party = args.party, addr = %node.addr, %shards, batchers = ?setup.batcher_uris, "router listening");
    let ready = serde_json::json!({
        "ready": "router",
        "party": args.party,
        "listen": node.addr.to_string(),
        "shards": shards.get(),
    });
    println!("{ready}");
    stopped().await?;
    info!(party = args.party, "router stopping");
    node.shutdown().await;
    Ok(())
}

/// Waits for SIGTERM or Ctrl-C (SIGINT).
pub async fn stopped() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => Ok(()),
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C"),
    }
}
