//! `fabrx node sidecar`: the committer's front process (docs/committer-nodes.md). This
//! file only parses arguments, reads the block source (a JSON Lines block file until the
//! orderer's Deliver stream exists) and builds the stages (in-process, or remote pools of
//! sigverifiers and vcservices with failover); `sidecar::node` runs the node and holds its
//! protocol decisions (resume point, store encoding, append then publish).

use anyhow::{Context, bail};
use clap::Args;
use committer::blockfile;
use committer::{LocalCommitter, LocalVerifier};
use sidecar::node::{Config, Deps, Feed};
use sidecar::remote::{RemoteConfig, VcPool, VerifierPool};
use sidecar::stages::{CommitStage, VerifyStage};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tracing::info;
use vcservice::config::{BackendOptions, open_backend};
use vcservice::{Engine, EngineConfig};
use wire::node::Node as _;
/// Arguments of `fabrx node sidecar`.
#[derive(Debug, Args)]
pub struct SidecarArgs {
    /// The block source: a JSON Lines block file (docs/committer-apply.md), for tools and
    /// tests. Without it the sidecar reads the orderer of `--network`.
    #[arg(long, required_unless_present = "network", conflicts_with = "network")]
    blocks: Option<std::path::PathBuf>,
    /// The network config file (`<dir>/config/network-config.json`): read ordered blocks
    /// from the assemblers, party `--party`'s first, each verified; the `_meta` policy is
    /// the network's.
    #[arg(long, requires = "party", value_name = "FILE", value_parser = crate::server_args::network_file)]
    network: Option<std::path::PathBuf>,
    /// The committing party (1..N), with `--network`.
    #[arg(long)]
    party: Option<u32>,
    /// Data directory: the append-only block store.
    #[arg(long = "data-dir", visible_alias = "store", value_name = "DIR")]
    store: std::path::PathBuf,
    /// vcservice endpoints (`host:port`, comma separated).
    #[arg(long, value_delimiter = ',', conflicts_with = "db")]
    vcservice: Vec<String>,
    /// Instead of remote vcservices: an in-process engine over this database
    /// (`embedded:DIR` or `postgres://…`).
    #[arg(long)]
    db: Option<String>,
    /// sigverifier endpoints (`host:port`, comma separated); none: verify in-process.
    #[arg(long, value_delimiter = ',')]
    verifier: Vec<String>,
    /// Address of the sidecar's gRPC service (notifications and lookups). Default: a free
    /// port on 127.0.0.1.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Prometheus `/metrics` listen address (off when absent).
    #[arg(long)]
    metrics: Option<String>,
    /// Concurrent verify-and-commit jobs.
    #[arg(long, default_value = "8")]
    workers: NonZeroUsize,
    /// Largest batch sent to a verifier or vcservice.
    #[arg(long, default_value = "500")]
    max_batch: NonZeroUsize,
    /// Limit on txs waiting in the dependency graph (back-pressure on intake).
    #[arg(long)]
    max_pending: Option<NonZeroUsize>,
    /// A remote call without an answer within this many milliseconds is resubmitted.
    #[arg(long, default_value_t = 30_000, value_parser = crate::server_args::positive_u64)]
    call_timeout_ms: u64,
    /// Exit once every block of the source is final (otherwise keep serving).
    #[arg(long)]
    exit_when_done: bool,
    #[command(flatten)]
    server: crate::server_args::ServerArgs,
}

/// Runs the sidecar until the source is done (`--exit-when-done`) or it is stopped.
/// Reading from the orderer, once its service listens it prints one JSON line to stdout:
/// `{"ready":"sidecar","party":P,"listen":"ip:port","next_block":N}`.
pub async fn run(args: SidecarArgs) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    let (feed, meta_policy, party) = feed(&args)?;
    let (verify, commit) = stages(&args).await?;
    // The `party` label when the sidecar reads a network's orderer.
    let labels: Vec<(&str, u32)> = party.map(|p| ("party", p)).into_iter().collect();
    let registry =
        crate::runner::metrics_with_data_dir("sidecar", args.metrics.as_deref(), &labels, &args.store)
            .await?;
    let config = Config {
        store: args.store.clone(),
        listen: args.listen.unwrap_or_else(sidecar::node::loopback_any_port),
        workers: args.workers,
        max_batch: args.max_batch,
        max_pending: args.max_pending,
        max_connections: Some(args.server.max_connections),
        idle_timeout_ms: std::num::NonZeroU64::new(args.server.idle_timeout_ms),
    };
    let deps = Deps {
        verify,
        commit,
        meta_policy,
        blocks: feed,
        registry,
    };
    let mut node = sidecar::node::spawn(config, deps)
        .await
        .with_context(|| format!("starting the sidecar on {}", args.store.display()))?;
    if let Some(party) = party {
        let ready = serde_json::json!({
            "ready": "sidecar",
            "party": party,
            "listen": node.addr.to_string(),
            "next_block": node.resumed_at,
        });
        println!("{ready}");
    }
    // A failed store append or stage stops the node; the error ends the process.
    let summary = tokio::select! {
        s = node.source_done() => s.context("the sidecar stopped")?,
        () = stopping.wait() => return node.stop().await.context("stopping the sidecar"),
    };
    info!(
        blocks = summary.blocks,
        seconds = summary.seconds,
        next = summary.next_block,
        "block source done"
    );
    if !args.exit_when_done {
        stopping.wait().await;
    }
    node.stop().await.context("stopping the sidecar")
}

/// The block feed, the `_meta` policy and the party the arguments ask for.
fn feed(args: &SidecarArgs) -> anyhow::Result<(Feed, types::NamespacePolicy, Option<u32>)> {
    if let Some(path) = &args.network {
        let party = args.party.context("--network needs --party")?;
        let config = netconfig::NetworkConfig::load(path)
            .with_context(|| format!("loading the network config {}", path.display()))?;
        config.install_tls(path, wire::tls::Role::Sidecar, party, None)?;
        let source = config.orderer_source(party)?;
        let meta = config.committers()?.meta_policy.clone();
        return Ok((Feed::Orderer(source), meta, Some(party)));
    }
    let path = args.blocks.as_ref().context("give --blocks or --network")?;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file = blockfile::parse(&text)?;
    Ok((Feed::Blocks(file.blocks), file.meta_policy, None))
}

/// The verify and commit stages the arguments ask for.
async fn stages(args: &SidecarArgs) -> anyhow::Result<(Arc<dyn VerifyStage>, Arc<dyn CommitStage>)> {
    let remote = RemoteConfig {
        call_timeout: Duration::from_millis(args.call_timeout_ms),
        ..RemoteConfig::default()
    };
    let verify: Arc<dyn VerifyStage> = if args.verifier.is_empty() {
        Arc::new(LocalVerifier::new())
    } else {
        Arc::new(VerifierPool::new(&args.verifier, remote.clone())?)
    };
    let commit: Arc<dyn CommitStage> = match (&args.db, args.vcservice.is_empty()) {
        (Some(db), _) => {
            let backend = open_backend(db, &BackendOptions::default())?;
            backend.init_schema().await.context("creating schema")?;
            Arc::new(LocalCommitter::new(Engine::new(
                backend,
                EngineConfig::default(),
                vcservice::metrics::Metrics::unexported()?,
            )))
        }
        (None, false) => Arc::new(VcPool::new(&args.vcservice, remote)?),
        (None, true) => bail!("give --vcservice endpoints or --db"),
    };
    Ok((verify, commit))
}
