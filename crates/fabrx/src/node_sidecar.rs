//! `fabrx node sidecar`: the committer's front process (docs/committer-nodes.md). It takes
//! blocks in order from a block source (a JSON Lines block file until the orderer's
//! Deliver stream exists), runs intake and the coordinator's dependency graph in-process
//! (ADR 0004), sends released txs to remote sigverifiers and vcservices with failover,
//! appends each finished block with its statuses to the block store, and serves
//! notifications and lookups.
//!
//! Restart: the block store is appended only after a block is final and its number is
//! recorded in the state database, so on start the sidecar resumes at the store's next
//! block. Blocks the state database already finished are replayed: the vcservice answers
//! their txs with the stored statuses (idempotent resubmission), which refills a lagging
//! store from the state database without committing anything twice.

use anyhow::{Context, bail};
use clap::Args;
use committer::blockfile;
use committer::{LocalCommitter, LocalVerifier};
use sidecar::notify::{Notifier, NotifierConfig};
use sidecar::pipeline::{Pipeline, PipelineConfig};
use sidecar::remote::{RemoteConfig, VcPool, VerifierPool};
use sidecar::service::{ServiceConfig, SidecarGrpc};
use sidecar::stages::{CommitStage, VerifyStage};
use sidecar::store::BlockStore;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::info;
use types::Block;
use vcservice::config::open_backend;
use vcservice::{Engine, EngineConfig};

/// Arguments of `fabrx node sidecar`.
#[derive(Debug, Args)]
pub struct SidecarArgs {
    /// The block source: a JSON Lines block file (docs/committer-apply.md).
    #[arg(long)]
    blocks: std::path::PathBuf,
    /// Directory of the append-only block store.
    #[arg(long)]
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
    /// Address of the sidecar's gRPC service (notifications and lookups).
    #[arg(long)]
    listen: Option<String>,
    /// Prometheus `/metrics` listen address (off when absent).
    #[arg(long)]
    metrics: Option<String>,
    /// Concurrent verify-and-commit jobs.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Largest batch sent to a verifier or vcservice.
    #[arg(long, default_value_t = 500)]
    max_batch: usize,
    /// Limit on txs waiting in the dependency graph (back-pressure on intake).
    #[arg(long)]
    max_pending: Option<usize>,
    /// A remote call without an answer within this many milliseconds is resubmitted.
    #[arg(long, default_value_t = 30_000)]
    call_timeout_ms: u64,
    /// Exit once every block of the source is final (otherwise keep serving).
    #[arg(long)]
    exit_when_done: bool,
}

/// The stored form of a block: its txs as a `VcBatch` (id, height, body).
fn encode_block(b: &Block) -> anyhow::Result<Vec<u8>> {
    use prost::Message;
    Ok(wire::convert::block_to_vc_batch(b)?.encode_to_vec())
}

/// Runs the sidecar until the source is done (`--exit-when-done`) or it is stopped.
pub async fn run(args: SidecarArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.blocks)
        .with_context(|| format!("reading {}", args.blocks.display()))?;
    let file = blockfile::parse(&text)?;
    let mut store = BlockStore::open(&args.store)
        .with_context(|| format!("opening block store {}", args.store.display()))?;
    let start = store.next_block();
    let remote = RemoteConfig {
        call_timeout: Duration::from_millis(args.call_timeout_ms.max(1)),
        ..RemoteConfig::default()
    };
    let verify: Arc<dyn VerifyStage> = if args.verifier.is_empty() {
        Arc::new(LocalVerifier::new())
    } else {
        Arc::new(VerifierPool::new(&args.verifier, remote.clone())?)
    };
    let commit: Arc<dyn CommitStage> = match (&args.db, args.vcservice.is_empty()) {
        (Some(db), _) => {
            let backend = open_backend(db, 8, 0, true)?;
            backend.init_schema().await.context("creating schema")?;
            Arc::new(LocalCommitter::new(Engine::new(
                backend,
                EngineConfig::default(),
                None,
            )))
        }
        (None, false) => Arc::new(VcPool::new(&args.vcservice, remote)?),
        (None, true) => bail!("give --vcservice endpoints or --db"),
    };
    let reader = store.reader();
    let notifier = Notifier::new(NotifierConfig::default(), Arc::new(reader.clone()));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = None;
    if let Some(listen) = &args.listen {
        let addr: std::net::SocketAddr = listen
            .parse()
            .with_context(|| format!("listen address {listen}"))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let svc = SidecarGrpc::new(reader, notifier.clone(), ServiceConfig::default());
        info!(%addr, "sidecar service listening");
        server = Some(tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(svc.into_server())
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stop_rx.await;
                })
                .await
            {
                tracing::error!(error = %e, "sidecar service stopped");
            }
        }));
    }
    let db_next = commit.last_committed().await?.map_or(0, |b| b + 1);
    info!(store_next = start, db_next, "sidecar starting");
    if let Some(first) = file.blocks.first()
        && first.number() > start
    {
        bail!(
            "the block source starts at block {}, the store needs block {start}",
            first.number()
        );
    }
    let mut config = PipelineConfig {
        workers: args.workers.max(1),
        max_batch: args.max_batch.max(1),
        ..PipelineConfig::default()
    };
    config.graph.first_block = start;
    if let Some(p) = args.max_pending {
        config.graph.max_pending = p.max(1);
    }
    let mut pipeline = Pipeline::with_stages(verify, commit, &file.meta_policy, config).await?;
    if let Some(addr) = &args.metrics {
        let registry = prometheus::Registry::new();
        pipeline = pipeline.with_metrics(sidecar::metrics::Metrics::register(&registry)?);
        crate::metrics_http::serve(addr.clone(), registry).await?;
    }
    let blocks: Vec<Block> = file.blocks.into_iter().filter(|b| b.number() >= start).collect();
    let encoded: std::collections::HashMap<u64, Vec<u8>> = blocks
        .iter()
        .map(|b| Ok((b.number(), encode_block(b)?)))
        .collect::<anyhow::Result<_>>()?;
    let total = blocks.len();
    let began = Instant::now();
    // A block is stored before it is published; a failed append stops the sidecar at
    // once (the pipeline returns the error): nothing after it is stored or published, and
    // a restart resumes at the store's next block, replaying what the database already
    // decided (idempotent resubmission).
    pipeline
        .run(blocks, |result| {
            let bytes = encoded.get(&result.number).map_or(&[][..], |v| v.as_slice());
            store.append(result.number, bytes, &result.statuses)?;
            notifier.publish(result.number, &result.statuses);
            let n = result.number.saturating_add(1).saturating_sub(start);
            if n % 50 == 0 || n as usize == total {
                info!(block = result.number, done = n, total, "blocks final");
            }
            Ok(())
        })
        .await
        .context("the sidecar stopped")?;
    info!(
        blocks = total,
        seconds = began.elapsed().as_secs_f64(),
        next = store.next_block(),
        "block source done"
    );
    if !args.exit_when_done {
        tokio::signal::ctrl_c().await?;
    }
    // Stop accepting calls, and give open notification streams a moment to deliver what
    // was published (a stream ends once its client closed and every watched id is answered).
    let _ = stop_tx.send(());
    if let Some(server) = server
        && tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .is_err()
    {
        tracing::warn!("notification streams still open after 5 s; exiting");
    }
    Ok(())
}
