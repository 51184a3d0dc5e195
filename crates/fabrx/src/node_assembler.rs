//! `fabrx node assembler`: party P's assembler (crates/assembler, docs/assembler.md),
//! configured from the network config file (docs/network-config.md).

use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use tracing::info;

/// Arguments of `fabrx node assembler`.
#[derive(Debug, Args)]
pub struct AssemblerArgs {
    /// The network config file (`fabrx network generate` writes
    /// `<dir>/config/network-config.json`).
    #[arg(long = "network", visible_alias = "config", value_name = "FILE", value_parser = crate::server_args::network_file)]
    config: PathBuf,
    /// This assembler's party (1..N).
    #[arg(long)]
    party: u32,
    /// With `--network` the genesis config: the config that adds this party to the
    /// running network. The node takes its endpoint and TLS identity from it and builds
    /// the whole ledger from the other parties' batchers (docs/reconfiguration.md
    /// "Adding a party").
    #[arg(long, value_name = "FILE")]
    join: Option<PathBuf>,
    /// Data directory (created if missing): the party's ledger in `ledger/`.
    #[arg(long)]
    data_dir: PathBuf,
    /// Listen address of the Deliver service (`ip:port`; port 0 picks a free port,
    /// printed in the ready line). Default: the assembler's endpoint in the config.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Prometheus `/metrics` listen address (off when absent; docs/metrics.md).
    #[arg(long)]
    metrics: Option<String>,
}

/// Serves until SIGTERM or Ctrl-C (exit 0), or until the node stops on its own (a ledger
/// failure, or a verified chain that does not continue the ledger: exit non-zero). Once
/// listening it prints one JSON line to stdout:
/// `{"ready":"assembler","party":P,"listen":"ip:port","height":H}` (H: blocks held).
pub async fn run(args: AssemblerArgs) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    let (genesis, joined) = crate::join_args::load(&args.config, args.join.as_deref(), args.party)?;
    let config = joined.as_ref().unwrap_or(&genesis);
    crate::join_args::install_tls(
        config,
        &args.config,
        wire::tls::Role::Assembler,
        args.party,
        None,
        joined.is_some(),
    )?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let cfg = match &joined {
        Some(joined) => genesis.joining_assembler_config(joined, args.party, &args.data_dir, args.listen)?,
        None => config.assembler_node_config(args.party, &args.data_dir, args.listen)?,
    };
    let deps = assembler::node::Deps {
        registry: crate::runner::metrics_with_data_dir(
            "assembler",
            args.metrics.as_deref(),
            &[("party", args.party)],
            &args.data_dir,
        )
        .await?,
    };
    let running = assembler::node::spawn(cfg, deps)
        .await
        .with_context(|| format!("starting party {} assembler", args.party))?;
    info!(party = args.party, addr = %running.addr, height = running.height, "assembler listening");
    let ready = serde_json::json!({
        "ready": "assembler",
        "party": args.party,
        "listen": running.addr.to_string(),
        "height": running.height,
    });
    let what = format!("party {} assembler", args.party);
    crate::runner::serve(running, &what, Some(ready), &mut stopping).await
}
