//! `fabrx committer apply`: the committer without an orderer (docs/committer-apply.md).

use anyhow::Context;
use clap::{Args, Subcommand};
use committer::blockfile::{self, encode_bytes};
use serde_json::json;
use sidecar::pipeline::PipelineConfig;
use vcservice::config::{BackendOptions, open_backend};
use vcservice::{Engine, EngineConfig};

/// Committer tools.
#[derive(Debug, Subcommand)]
pub enum CommitterCmd {
    /// Run the blocks of a JSON Lines file through the committer pipeline and print one
    /// JSON line per tx with its final status.
    Apply(ApplyArgs),
}

/// Arguments of `fabrx committer apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The JSON Lines block file.
    #[arg(long)]
    blocks: std::path::PathBuf,
    /// `embedded:DIR` or `postgres://…` (default: a fresh embedded store that is deleted
    /// afterwards).
    #[arg(long)]
    db: Option<String>,
    /// Then print every row of every non-system namespace.
    #[arg(long)]
    print_state: bool,
    /// Concurrent verify-and-commit jobs.
    #[arg(long, default_value = "4", value_parser = crate::server_args::positive_usize)]
    workers: std::num::NonZeroUsize,
}

/// Runs a committer command.
pub async fn run(cmd: CommitterCmd) -> anyhow::Result<()> {
    match cmd {
        CommitterCmd::Apply(args) => apply(args).await,
    }
}

async fn apply(args: ApplyArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.blocks)
        .with_context(|| format!("reading {}", args.blocks.display()))?;
    let file = blockfile::parse(&text)?;
    let tmp = tempfile::tempdir()?;
    let db = args
        .db
        .unwrap_or_else(|| format!("embedded:{}", tmp.path().display()));
    let backend = open_backend(&db, &BackendOptions::default())?;
    backend.init_schema().await.context("creating schema")?;
    let engine = Engine::new(
        backend.clone(),
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported()?,
    );
    let mut config = PipelineConfig {
        workers: args.workers,
        ..PipelineConfig::default()
    };
    config.graph.first_block = file.blocks.first().map_or(0, |b| b.number());
    let mut pipeline = committer::in_process(engine, &file.meta_policy, config).await?;
    pipeline
        .run(file.blocks, |block| {
            for (index, (id, status)) in block.statuses.iter().enumerate() {
                println!(
                    "{{\"block\":{},\"index\":{index},\"id\":{},\"status\":\"{}\",\"code\":{}}}",
                    block.number,
                    json!(id.0),
                    status.name(),
                    status.code()
                );
            }
            Ok(())
        })
        .await?;
    if args.print_state {
        for ns in backend.namespaces().await? {
            if ns == types::META_NAMESPACE {
                continue;
            }
            for row in backend.scan(&ns).await? {
                println!(
                    "{{\"ns\":{},\"key\":{},\"value\":{},\"version\":{}}}",
                    json!(ns),
                    json!(encode_bytes(&row.key)),
                    json!(encode_bytes(&row.value)),
                    row.version
                );
            }
        }
    }
    Ok(())
}
