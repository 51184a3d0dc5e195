//! `fabrx node query`: a committing party's query service (crates/query,
//! docs/query.md), configured from the network config file: it reads the party's
//! validator-committer.

use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use tracing::info;

/// Arguments of `fabrx node query`.
#[derive(Debug, Args)]
pub struct QueryArgs {
    /// The network config file (`<dir>/config/network-config.json`).
    #[arg(long = "network", visible_alias = "config", value_name = "FILE", value_parser = crate::server_args::network_file)]
    config: PathBuf,
    /// The committing party (1..N) whose state it serves.
    #[arg(long)]
    party: u32,
    /// Listen address (`ip:port`; port 0 picks one). Default: its endpoint in the config.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Prometheus `/metrics` listen address (off when absent).
    #[arg(long)]
    metrics: Option<String>,
    #[command(flatten)]
    server: crate::server_args::ServerArgs,
}

/// Serves until SIGTERM or Ctrl-C. Once listening it prints one JSON line to stdout:
/// `{"ready":"query","party":P,"listen":"ip:port"}`.
pub async fn run(args: QueryArgs) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    let config = netconfig::NetworkConfig::load(&args.config)
        .with_context(|| format!("loading the network config {}", args.config.display()))?;
    config.install_tls(&args.config, wire::tls::Role::Query, args.party, None)?;
    let listen = match args.listen {
        Some(l) => l,
        None => config.query_endpoint(args.party)?.listen_addr(),
    };
    let vcservice = config.committer_party(args.party)?.vcservice.uri();
    let mut cfg = query::node::Config::new(listen, vec![vcservice]);
    cfg.server = args.server.limits();
    // Owners read their own tokens; the network's issuers may read anyone's (auditors).
    cfg.reads.auditors = config.token().map(|t| t.issuers.clone()).unwrap_or_default();
    let registry = crate::runner::metrics("query", args.metrics.as_deref(), &[("party", args.party)]).await?;
    let handle = query::node::spawn(cfg, query::node::Deps { registry })
        .await
        .with_context(|| format!("starting party {} query service", args.party))?;
    info!(party = args.party, addr = %handle.addr, "query service listening");
    let ready =
        serde_json::json!({ "ready": "query", "party": args.party, "listen": handle.addr.to_string() });
    let what = format!("party {} query service", args.party);
    crate::runner::serve(handle, &what, Some(ready), &mut stopping).await
}
