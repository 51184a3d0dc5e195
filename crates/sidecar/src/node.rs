//! The sidecar as a node: `Config` (validated once), `spawn(config, deps) -> Handle`.
//! The binary only parses arguments and builds the stages (in-process or remote); the
//! protocol decisions live here:
//!
//! - **resume point**: the block store is appended only after a block is final and its
//!   number is recorded in the state database, so the node resumes at the store's next
//!   block; blocks the database already finished are replayed and answered with their
//!   stored statuses (idempotent resubmission), which refills a lagging store;
//! - **store encoding**: a block is stored as its txs with their heights (`wire`), encoded
//!   once when the pipeline admits it; the stages splice each tx's body from those bytes;
//! - **append, then publish**: subscribers hear of a block only after it is durable; a
//!   failed append stops the node at once ("stop loudly").

use crate::metrics::Metrics;
use crate::notify::{Notifier, NotifierConfig};
use crate::pipeline::{ChannelSource, Pipeline, PipelineConfig};
use crate::service::{ServiceConfig, SidecarGrpc};
use crate::stages::{CommitStage, VerifyStage};
use crate::store::BlockStore;
use crate::{Error, Result};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tracing::info;
use types::{Block, NamespacePolicy};
use wire::node::Serving;

/// Configuration of a sidecar node (serde: a config file may carry it).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Directory of the append-only block store.
    pub store: PathBuf,
    /// Address of the sidecar's gRPC service (notifications and lookups; port 0: any
    /// free port, see [`Handle::addr`]).
    #[serde(default = "loopback_any_port")]
    pub listen: SocketAddr,
    /// Concurrent verify-and-commit jobs.
    pub workers: NonZeroUsize,
    /// Largest batch sent to a verifier or validator-committer.
    pub max_batch: NonZeroUsize,
    /// Limit on txs waiting in the dependency graph (back-pressure on intake); none: the
    /// graph's default.
    pub max_pending: Option<NonZeroUsize>,
    /// Most client connections of the service; none: the default (docs/limits.md).
    #[serde(default)]
    pub max_connections: Option<NonZeroUsize>,
    /// A service connection without traffic for this many milliseconds is closed; none:
    /// the default.
    #[serde(default)]
    pub idle_timeout_ms: Option<std::num::NonZeroU64>,
}

/// `127.0.0.1:0`: a local port the system picks.
pub fn loopback_any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

impl Config {
    /// A configuration with the default sizes, serving on a free local port.
    pub fn new(store: PathBuf) -> Config {
        Config {
            store,
            listen: loopback_any_port(),
            workers: NonZeroUsize::MIN.saturating_add(7),
            max_batch: NonZeroUsize::MIN.saturating_add(499),
            max_pending: None,
            max_connections: None,
            idle_timeout_ms: None,
        }
    }

    /// The connection-level limits of the service.
    pub fn server_limits(&self) -> wire::server::ServerLimits {
        let d = wire::server::ServerLimits::default();
        wire::server::ServerLimits {
            max_connections: self.max_connections.map_or(d.max_connections, NonZeroUsize::get),
            idle_timeout: self
                .idle_timeout_ms
                .map_or(d.idle_timeout, |ms| std::time::Duration::from_millis(ms.get())),
            ..d
        }
    }

    fn pipeline(&self, first_block: u64) -> PipelineConfig {
        let mut p = PipelineConfig {
            workers: self.workers,
            max_batch: self.max_batch,
            // The stored form of each block, whose tx bodies the stages splice.
            encode_blocks: true,
            // On a machine of 2 cores or fewer, which the sidecar shares with its
            // sigverifier and vcservice, the rayon workers' spinning after each round of
            // parallel builds cost more CPU than the builds (about 3 % of the sidecar's
            // CPU against 1.7 %, mock-orderer run on 2 cores, docs/benchmarks.md).
            build_in_parallel: std::thread::available_parallelism().is_ok_and(|n| n.get() > 2),
            ..PipelineConfig::default()
        };
        p.graph.first_block = first_block;
        if let Some(m) = self.max_pending {
            p.graph.max_pending = m.get();
        }
        p
    }
}

/// What the node is given to work with: its stages, its block source and its metrics.
pub struct Deps {
    /// Signature verification (in-process or a pool of sigverifiers).
    pub verify: Arc<dyn VerifyStage>,
    /// Validate and commit (in-process or a pool of vcservices).
    pub commit: Arc<dyn CommitStage>,
    /// The policy that endorses `_meta` txs.
    pub meta_policy: NamespacePolicy,
    /// Where the blocks come from.
    pub blocks: Feed,
    /// Where it makes its metrics (`telemetry::Registry::detached("sidecar")` unless the
    /// binary serves one).
    pub registry: telemetry::Registry,
}

/// Where a sidecar's blocks come from.
#[derive(Debug)]
pub enum Feed {
    /// Blocks at hand (a block file: tools and tests), from any block at or before the
    /// resume point, in order; the source is done after the last one.
    Blocks(Vec<Block>),
    /// The orderer's assemblers, read from the resume point on, without end.
    Orderer(crate::orderer::OrdererConfig),
}

/// What a finished block source leaves behind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Blocks run by this start (the replayed ones included).
    pub blocks: u64,
    /// The store's next block afterwards.
    pub next_block: u64,
    /// Seconds from start to the last block.
    pub seconds: f64,
}

/// How long `stop` gives open notification streams to deliver what was published.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// A running sidecar node.
pub struct Handle {
    /// The service's address.
    pub addr: SocketAddr,
    /// The block this start resumed at (the store's next block).
    pub resumed_at: u64,
    /// The block task, until `source_done` or `failed` saw it end.
    blocks: Option<JoinHandle<Result<Summary>>>,
    /// The orderer reader feeding the blocks, if any.
    feeder: Option<JoinHandle<()>>,
    serving: Serving,
}

impl Handle {
    /// Waits until every block of the source is final and stored (or the node failed).
    pub async fn source_done(&mut self) -> Result<Summary> {
        let Some(task) = self.blocks.as_mut() else {
            return Err(Error::Stage {
                stage: "sidecar",
                detail: "the block source already ended".into(),
            });
        };
        let result = task.await;
        self.blocks = None;
        result.map_err(|e| Error::Stage {
            stage: "sidecar",
            detail: e.to_string(),
        })?
    }
}

impl wire::node::Node for Handle {
    type Error = Error;

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Resolves when a stage, the store or the server failed. A source of blocks at hand
    /// that ended cleanly is not a failure: the node keeps serving lookups.
    async fn failed(&mut self) -> Result<()> {
        if self.blocks.is_some() {
            self.source_done().await?;
        }
        self.serving.ended().await.map_err(|e| Error::Stage {
            stage: "sidecar service",
            detail: e.reason,
        })
    }

    /// Stops accepting calls and gives open notification streams up to [`STOP_GRACE`] to
    /// deliver what was published (a stream ends once its client closed and every
    /// watched id is answered).
    async fn stop(mut self) -> Result<()> {
        // Aborted and awaited: the store (and its lock) and the Deliver stream are gone
        // once `stop` returns.
        if let Some(task) = self.blocks.take() {
            task.abort();
            let _ = task.await;
        }
        if let Some(feeder) = self.feeder.take() {
            feeder.abort();
            let _ = feeder.await;
        }
        self.serving.stop(STOP_GRACE).await;
        Ok(())
    }
}

/// Opens the store, starts the service (when configured) and runs the block source
/// through the pipeline from the store's next block.
pub async fn spawn(config: Config, deps: Deps) -> Result<Handle> {
    let store = BlockStore::open(&config.store)?;
    let start = store.next_block();
    if let Feed::Blocks(blocks) = &deps.blocks
        && let Some(first) = blocks.first()
        && first.number() > start
    {
        return Err(Error::Config {
            detail: format!(
                "the block source starts at block {}, the store needs block {start}",
                first.number()
            ),
        });
    }
    let reader = store.reader();
    let notifier = Notifier::new(NotifierConfig::default(), Arc::new(reader.clone()));
    let svc = SidecarGrpc::new(reader, notifier.clone(), ServiceConfig::default());
    let listen_error = |e: wire::node::ListenError| Error::Listen {
        addr: e.addr.to_string(),
        source: std::io::Error::other(e.reason),
    };
    let listener = wire::node::bind(config.listen).await.map_err(listen_error)?;
    // The connections set TCP_NODELAY: small notifications must not wait for Nagle's
    // delay.
    let serving = wire::node::serve(listener, &config.server_limits(), |b| {
        b.add_service(svc.into_server())
    })
    .map_err(listen_error)?;
    info!(addr = %serving.addr(), "sidecar service listening");
    let db_next = deps
        .commit
        .last_committed()
        .await?
        .map_or(0, |b| b.saturating_add(1));
    info!(store_next = start, db_next, "sidecar starting");
    let pipeline = Pipeline::with_stages(
        deps.verify,
        deps.commit,
        &deps.meta_policy,
        config.pipeline(start),
        Metrics::register(&deps.registry)?,
    )
    .await?;
    let (source, feeder) = feed(deps.blocks, start, &config.store)?;
    let task = tokio::spawn(run_blocks(pipeline, source, store, notifier));
    Ok(Handle {
        addr: serving.addr(),
        resumed_at: start,
        blocks: Some(task),
        feeder,
        serving,
    })
}

/// The channel the pipeline takes blocks from, from block `start` on, and the task
/// that fills it (none for blocks at hand).
fn feed(
    feed: Feed,
    start: u64,
    store: &std::path::Path,
) -> Result<(tokio::sync::mpsc::Receiver<Block>, Option<JoinHandle<()>>)> {
    Ok(match feed {
        Feed::Blocks(blocks) => {
            let (tx, rx) = tokio::sync::mpsc::channel(blocks.len().max(1));
            for b in blocks.into_iter().filter(|b| b.number() >= start) {
                // The channel holds every block: this cannot be full.
                let _ = tx.try_send(b);
            }
            (rx, None)
        }
        Feed::Orderer(mut cfg) => {
            // The consenter sets learned from config blocks live beside the block store.
            cfg.sets_file
                .get_or_insert_with(|| store.with_extension("consenter-sets"));
            let (rx, task) = crate::orderer::spawn(cfg, start)?;
            (rx, Some(task))
        }
    })
}

/// Runs the blocks through the pipeline; each final block is appended to the store,
/// then published.
async fn run_blocks(
    mut pipeline: Pipeline,
    source: tokio::sync::mpsc::Receiver<Block>,
    mut store: BlockStore,
    notifier: Notifier,
) -> Result<Summary> {
    let began = Instant::now();
    let mut done = 0u64;
    let result = pipeline
        .run_source(ChannelSource::new(source), |result| {
            // The pipeline encodes every block it admits (`encode_blocks`).
            let bytes = result.stored.as_deref().ok_or_else(|| Error::Stage {
                stage: "store",
                detail: format!("block {} was not encoded", result.number),
            })?;
            store.append(result.number, bytes, &result.statuses)?;
            notifier.publish(result.number, result.statuses);
            done = done.saturating_add(1);
            if done.is_multiple_of(50) {
                info!(block = result.number, done, "blocks final");
            }
            Ok(())
        })
        .await;
    result?;
    Ok(Summary {
        blocks: done,
        next_block: store.next_block(),
        seconds: began.elapsed().as_secs_f64(),
    })
}
