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
    #[arg(long = "network", visible_alias = "config", value_name = "FILE", value_parser = crate::server_args::network_file)]
    config: PathBuf,
    /// This router's party (1..N).
    #[arg(long)]
    party: u32,
    /// With `--network` the genesis config: the config that adds this party to the
    /// running network; the router takes everything from it (docs/reconfiguration.md
    /// "Adding a party"). Its batchers take requests once the decision that adds the
    /// party is known to them.
    #[arg(long, value_name = "FILE")]
    join: Option<PathBuf>,
    /// Listen address (`ip:port`; port 0 picks a free port, printed in the ready line).
    /// Default: the party's router endpoint in the config (every interface when it
    /// names a host rather than an IP).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Prometheus `/metrics` listen address (off when absent; docs/metrics.md).
    #[arg(long)]
    metrics: Option<String>,
    #[command(flatten)]
    server: crate::server_args::ServerArgs,
}

/// Serves until SIGTERM or Ctrl-C. Once listening it prints one JSON line to stdout:
/// `{"ready":"router","party":P,"listen":"ip:port","shards":S}`.
pub async fn run(args: RouterArgs) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    let (genesis, joined) = crate::join_args::load(&args.config, args.join.as_deref(), args.party)?;
    let joining = joined.is_some();
    // A joining router takes everything from the config that adds its party.
    let config = joined.unwrap_or(genesis);
    crate::join_args::install_tls(
        &config,
        &args.config,
        wire::tls::Role::Router,
        args.party,
        None,
        joining,
    )?;
    let mut setup = config.router_setup(args.party, args.listen)?;
    setup.node.server = args.server.limits();
    let mut deps = router::node::Deps::grpc(&setup.node.router, setup.batcher_uris.clone());
    deps.registry =
        crate::runner::metrics("router", args.metrics.as_deref(), &[("party", args.party)]).await?;
    let shards = setup.node.router.shards;
    let node = router::node::spawn(setup.node, deps)
        .await
        .with_context(|| format!("starting party {}'s router", args.party))?;
    // Config updates its clients submit go on to the consenters (docs/reconfiguration.md).
    node.service.set_config_updates(std::sync::Arc::new(
        crate::config_follow::ConsenterConfigUpdates::new(&config, args.party),
    ));
    info!(party = args.party, addr = %node.addr, %shards, batchers = ?setup.batcher_uris, "router listening");
    let ready = serde_json::json!({
        "ready": "router",
        "party": args.party,
        "listen": node.addr.to_string(),
        "shards": shards.get(),
    });
    // A router reads no decisions: it follows the TLS section of the config in force,
    // and whether its party is still in force, by asking the consenters (ADR 0019).
    let mut follower = crate::config_follow::spawn_follower(config.clone(), args.party, config.tls_enabled());
    let what = format!("party {}'s router", args.party);
    let served = tokio::select! {
        served = crate::runner::serve(node, &what, Some(ready), &mut stopping) => served,
        Ok(party) = &mut follower => {
            anyhow::bail!("party {party} left the network (a config update removed it): this router stopped")
        }
    };
    follower.abort();
    served
}
