//! `fabrx node batcher`: party P's batcher of shard S (crates/batcher, docs/batcher.md
//! "Shell"), configured from the network config file (docs/network-config.md).

use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use tracing::info;

/// Arguments of `fabrx node batcher`.
#[derive(Debug, Args)]
pub struct BatcherArgs {
    /// The network config file (`fabrx network generate` writes
    /// `<dir>/config/network-config.json`).
    #[arg(long = "network", visible_alias = "config", value_name = "FILE", value_parser = crate::server_args::network_file)]
    config: PathBuf,
    /// This batcher's party (1..N).
    #[arg(long)]
    party: u32,
    /// This batcher's shard (0..S).
    #[arg(long)]
    shard: u32,
    /// With `--network` the genesis config: the config that adds this party to the
    /// running network. The node takes its entry, key, endpoint and TLS identity from it,
    /// follows the decisions until the one that adds its party and starts there
    /// (docs/reconfiguration.md "Adding a party").
    #[arg(long, value_name = "FILE")]
    join: Option<PathBuf>,
    /// Data directory (created if missing): `batches/` and `progress/` journals.
    #[arg(long)]
    data_dir: PathBuf,
    /// This batcher's key file. Default: `<dir>/keys/party-<P>/batcher-<S>.key`, `<dir>`
    /// being the directory above the config file's.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// A key this batcher signs with once a config update names it for this batcher
    /// (docs/reconfiguration.md "Rotating a batcher key"); read when that update is put in
    /// force, so it may be written there while the node runs. Repeat it for several
    /// (the first file holding the named key is taken). Default: the key file's path
    /// with `.next.key` in place of `.key`.
    #[arg(long, value_name = "FILE")]
    next_key_file: Vec<PathBuf>,
    /// Listen address (`ip:port`; port 0 picks a free port, printed in the ready line).
    /// Default: the batcher's endpoint in the config (every interface when it names a
    /// host rather than an IP).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Prometheus `/metrics` listen address (off when absent; docs/metrics.md).
    #[arg(long)]
    metrics: Option<String>,
    /// Test builds only (feature `testing`): behave as a Byzantine batcher
    /// (`withhold:P`: serve batches to party P only, forge every fetch answer;
    /// `equivocate-late:P`: serve a batch holding a victim request without it to party P,
    /// and with it to the others once the first version is ordered).
    #[cfg(feature = "testing")]
    #[arg(long)]
    byzantine: Option<batcher::node::testing::Byzantine>,
}

/// Serves until SIGTERM or Ctrl-C (exit 0), or until the node stops on its own (a storage
/// failure: exit non-zero). Once listening it prints one JSON line to stdout:
/// `{"ready":"batcher","party":P,"shard":S,"listen":"ip:port","term":T}`.
pub async fn run(args: BatcherArgs) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    let (genesis, joined) = crate::join_args::load(&args.config, args.join.as_deref(), args.party)?;
    let config = joined.as_ref().unwrap_or(&genesis);
    crate::join_args::install_tls(
        config,
        &args.config,
        wire::tls::Role::Batcher,
        args.party,
        Some(args.shard),
        joined.is_some(),
    )?;
    let node = netconfig::Node::Batcher {
        party: args.party,
        shard: args.shard,
    };
    let key_file = match args.key_file {
        Some(file) => file,
        None => netconfig::key_file_path(&netconfig::tls::network_dir(&args.config), node)
            .context("a batcher has a key file")?,
    };
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let data_dir = args.data_dir.clone();
    let next_key_files = if args.next_key_file.is_empty() {
        vec![key_file.with_extension("next.key")]
    } else {
        args.next_key_file.clone()
    };
    let mut cfg = match &joined {
        Some(joined) => genesis.joining_batcher_config(
            joined,
            args.party,
            args.shard,
            &key_file,
            args.data_dir,
            args.listen,
        )?,
        None => config.batcher_node_config(args.party, args.shard, &key_file, args.data_dir, args.listen)?,
    };
    cfg.next_key_files = next_key_files;
    let labels = [("party", args.party), ("shard", args.shard)];
    let deps = batcher::node::Deps {
        registry: crate::runner::metrics_with_data_dir(
            "batcher",
            args.metrics.as_deref(),
            &labels,
            &data_dir,
        )
        .await?,
        #[cfg(feature = "testing")]
        byzantine: args.byzantine,
        ..batcher::node::Deps::default()
    };
    let handle = batcher::node::spawn(cfg, deps)
        .await
        .with_context(|| format!("starting {node}"))?;
    let term = handle.stats.snapshot().term;
    info!(party = args.party, shard = args.shard, addr = %handle.addr, term, "batcher listening");
    let ready = serde_json::json!({
        "ready": "batcher",
        "party": args.party,
        "shard": args.shard,
        "listen": handle.addr.to_string(),
        "term": term,
    });
    crate::runner::serve(handle, &node.to_string(), Some(ready), &mut stopping).await
}
