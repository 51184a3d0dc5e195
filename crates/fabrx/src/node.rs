//! `fabrx node <role>` and `fabrx init-db`.

use anyhow::Context;
use clap::{Args, Subcommand};
use vcservice::config::{BackendOptions, VcConfig, open_backend};

/// Roles a node can run.
#[derive(Debug, Subcommand)]
pub enum Role {
    /// The validator-committer service.
    Vcservice {
        /// TOML configuration file (see docs/vcservice.md).
        #[arg(long)]
        config: std::path::PathBuf,
        /// The network config file: authenticate with party `--party`'s vcservice
        /// certificate and serve only its sidecar (mutual TLS; nothing for a network
        /// without).
        #[arg(long, requires = "party", value_name = "FILE", value_parser = crate::server_args::network_file)]
        network: Option<std::path::PathBuf>,
        /// The party (1..N): with `--network`, whose identity it serves under; alone, the
        /// `party` label of its metrics.
        #[arg(long)]
        party: Option<u32>,
    },
    /// The committer's sidecar (with the coordinator's dependency graph in-process).
    #[command(
        override_usage = "fabrx node sidecar --network FILE --party P --data-dir DIR [OPTIONS]  \
                                (a network's party: blocks from its assemblers)\n       \
                                fabrx node sidecar --blocks FILE --data-dir DIR [OPTIONS]  \
                                (blocks from a file)"
    )]
    Sidecar(crate::node_sidecar::SidecarArgs),
    /// The stateless signature verifier.
    Sigverifier(crate::node_sigverifier::SigverifierArgs),
    /// One replica of a BFT consensus cluster.
    Bft(crate::node_bft::BftArgs),
    /// A party's Arma router, configured from the network config file.
    Router(crate::node_router::RouterArgs),
    /// A party's Arma batcher of one shard, configured from the network config file
    /// (docs/batcher.md).
    Batcher(crate::node_batcher::BatcherArgs),
    /// One Arma consenter: the BFT cluster ordering BAFs and complaints into block
    /// headers (docs/consenter.md).
    #[command(
        override_usage = "fabrx node consenter --network FILE --party P --data-dir DIR [OPTIONS]  \
                                (from the network config)\n       \
                                fabrx node consenter --id I --peers A,B,.. --parties N --shards S \
                                --batcher-keys FILE --data-dir DIR (--seed-prefix X | --key-file F) [OPTIONS]"
    )]
    Consenter(crate::node_consenter::ConsenterArgs),
    /// A party's Arma assembler: joins ordered headers and batches into the party's
    /// ledger and serves it on a Deliver stream (docs/assembler.md).
    Assembler(crate::node_assembler::AssemblerArgs),
    /// A token endorser: checks token requests and signs settlement txs with its share
    /// of the token namespace's threshold key (docs/token.md).
    Endorser(crate::node_endorser::EndorserArgs),
    /// A committing party's query service: consistent reads over its committed state
    /// for wallets and endorsers (docs/query.md).
    Query(crate::node_query::QueryArgs),
}

/// Arguments of `fabrx init-db`.
#[derive(Debug, Args)]
pub struct InitDbArgs {
    /// `postgres://…` URL (or `embedded:DIR`).
    #[arg(long)]
    db: String,
    /// YugabyteDB: pre-split tables into this many tablets (absent: do not pre-split).
    #[arg(long)]
    tablets: Option<std::num::NonZeroU32>,
}

/// Creates the schema.
pub async fn init_db(args: InitDbArgs) -> anyhow::Result<()> {
    let backend = open_backend(
        &args.db,
        &BackendOptions {
            pool_size: std::num::NonZeroU32::MIN,
            tablets: args.tablets,
            ..BackendOptions::default()
        },
    )?;
    backend.init_schema().await.context("creating schema")?;
    println!("schema ready");
    Ok(())
}

/// Runs a node until it is stopped.
pub async fn run(role: Role) -> anyhow::Result<()> {
    match role {
        Role::Vcservice {
            config,
            network,
            party,
        } => {
            if let (Some(path), Some(party)) = (&network, party) {
                let net = netconfig::NetworkConfig::load(path)
                    .with_context(|| format!("loading the network config {}", path.display()))?;
                net.install_tls(path, wire::tls::Role::Vcservice, party, None)?;
            }
            run_vcservice(&config, party).await
        }
        Role::Sidecar(args) => crate::node_sidecar::run(args).await,
        Role::Sigverifier(args) => crate::node_sigverifier::run(args).await,
        Role::Bft(args) => crate::node_bft::run(args).await,
        Role::Router(args) => crate::node_router::run(args).await,
        Role::Batcher(args) => crate::node_batcher::run(args).await,
        Role::Consenter(args) => crate::node_consenter::run(args).await,
        Role::Assembler(args) => crate::node_assembler::run(args).await,
        Role::Endorser(args) => crate::node_endorser::run(args).await,
        Role::Query(args) => crate::node_query::run(args).await,
    }
}

/// Runs a vcservice from its TOML file; its metrics carry the label `party` when it
/// serves one (`--party`).
async fn run_vcservice(path: &std::path::Path, party: Option<u32>) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let cfg = VcConfig::from_toml(&text)?;
    let labels: Vec<(&str, u32)> = party.map(|p| ("party", p)).into_iter().collect();
    let registry = crate::runner::metrics("vcservice", cfg.metrics_listen.as_deref(), &labels).await?;
    if let Ok(vcservice::config::DbTarget::Embedded(dir)) = vcservice::config::DbTarget::parse(&cfg.db) {
        registry.data_dir(&dir)?;
    }
    let node = vcservice::node::spawn(cfg, vcservice::node::Deps { registry })
        .await
        .context("starting the vcservice")?;
    let ready = serde_json::json!({ "ready": "vcservice", "listen": node.addr.to_string() });
    crate::runner::serve(node, "the vcservice", Some(ready), &mut stopping).await
}
