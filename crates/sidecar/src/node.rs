//! The sidecar as a node: `Config` (validated once), `spawn(config, deps) -> Handle`.
//! The binary only parses arguments and builds the stages (in-process or remote); the
//! protocol decisions live here:
//!
//! - **resume point**: the block store is appended only after a block is final and its
//!   number is recorded in the state database, so the node resumes at the store's next
//!   block; blocks the database already finished are replayed and answered with their
//!   stored statuses (idempotent resubmission), which refills a lagging store;
//! - **store encoding**: a block is stored as its txs with their heights (`wire`);
//! - **append, then publish**: subscribers hear of a block only after it is durable; a
//!   failed append stops the node at once ("stop loudly").

use crate::metrics::Metrics;
use crate::notify::{Notifier, NotifierConfig};
use crate::pipeline::{Pipeline, PipelineConfig};
use crate::service::{ServiceConfig, SidecarGrpc};
use crate::stages::{CommitStage, VerifyStage};
use crate::store::BlockStore;
use crate::{Error, Result};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::info;
use types::{Block, NamespacePolicy};

/// Configuration of a sidecar node (serde: a config file may carry it).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Directory of the append-only block store.
    pub store: PathBuf,
    /// Address of the sidecar's gRPC service (notifications and lookups); none: no service.
    pub listen: Option<SocketAddr>,
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
    pub idle_timeout_ms: Option<u64>,
}

impl Config {
    /// A configuration with the default sizes.
    pub fn new(store: PathBuf) -> Config {
        Config {
            store,
            listen: None,
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
                .map_or(d.idle_timeout, |ms| std::time::Duration::from_millis(ms.max(1))),
            ..d
        }
    }

    fn pipeline(&self, first_block: u64) -> PipelineConfig {
        let mut p = PipelineConfig {
            workers: self.workers.get(),
            max_batch: self.max_batch.get(),
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
    /// The block source, from any block at or before the resume point, in order.
    pub blocks: Vec<Block>,
    /// Metrics to report to (registered by the caller); none: unexported.
    pub metrics: Option<Metrics>,
}

/// What a finished block source leaves behind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Blocks run by this start (the replayed ones included).
    pub blocks: usize,
    /// The store's next block afterwards.
    pub next_block: u64,
    /// Seconds from start to the last block.
    pub seconds: f64,
}

/// A running sidecar node.
pub struct Handle {
    blocks: JoinHandle<Result<Summary>>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
    /// The service's address, when it listens.
    pub listen: Option<SocketAddr>,
}

impl Handle {
    /// Waits until every block of the source is final and stored (or the node failed).
    pub async fn source_done(&mut self) -> Result<Summary> {
        (&mut self.blocks).await.map_err(|e| Error::Stage {
            stage: "sidecar",
            detail: e.to_string(),
        })?
    }

    /// Stops accepting calls and gives open notification streams up to `grace` to
    /// deliver what was published (a stream ends once its client closed and every
    /// watched id is answered).
    pub async fn stop(mut self, grace: Duration) {
        self.blocks.abort();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take()
            && tokio::time::timeout(grace, server).await.is_err()
        {
            tracing::warn!(?grace, "notification streams still open; stopping anyway");
        }
    }
}

/// Opens the store, starts the service (when configured) and runs the block source
/// through the pipeline from the store's next block.
pub async fn spawn(config: Config, deps: Deps) -> Result<Handle> {
    let mut store = BlockStore::open(&config.store)?;
    let start = store.next_block();
    if let Some(first) = deps.blocks.first()
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
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (server, listen) = match config.listen {
        Some(addr) => {
            let svc = SidecarGrpc::new(reader, notifier.clone(), ServiceConfig::default());
            let (server, bound) = serve(addr, svc, config.server_limits(), stop_rx).await?;
            (Some(server), Some(bound))
        }
        None => (None, None),
    };
    let db_next = deps
        .commit
        .last_committed()
        .await?
        .map_or(0, |b| b.saturating_add(1));
    info!(store_next = start, db_next, "sidecar starting");
    let mut pipeline = Pipeline::with_stages(
        deps.verify,
        deps.commit,
        &deps.meta_policy,
        config.pipeline(start),
    )
    .await?;
    if let Some(m) = deps.metrics {
        pipeline = pipeline.with_metrics(m);
    }
    let blocks: Vec<Block> = deps.blocks.into_iter().filter(|b| b.number() >= start).collect();
    let task = tokio::spawn(async move {
        let total = blocks.len();
        let encoded = blocks
            .iter()
            .map(encode_block)
            .collect::<Result<std::collections::HashMap<u64, Vec<u8>>>>()?;
        let began = Instant::now();
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
            .await?;
        Ok(Summary {
            blocks: total,
            next_block: store.next_block(),
            seconds: began.elapsed().as_secs_f64(),
        })
    });
    Ok(Handle {
        blocks: task,
        stop: Some(stop_tx),
        server,
        listen,
    })
}

/// The stored form of a block: its txs with their heights as a `VcBatch`.
fn encode_block(b: &Block) -> Result<(u64, Vec<u8>)> {
    use prost::Message;
    Ok((b.number(), wire::convert::block_to_vc_batch(b)?.encode_to_vec()))
}

async fn serve(
    addr: SocketAddr,
    svc: SidecarGrpc,
    limits: wire::server::ServerLimits,
    stop: oneshot::Receiver<()>,
) -> Result<(JoinHandle<()>, SocketAddr)> {
    let io = |source| Error::Listen {
        addr: addr.to_string(),
        source,
    };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(io)?;
    let bound = listener.local_addr().map_err(io)?;
    info!(addr = %bound, "sidecar service listening");
    let server = tokio::spawn(async move {
        // The connections set TCP_NODELAY: small notifications must not wait for Nagle's
        // delay.
        let (incoming, _stats) = wire::server::incoming(listener, &limits);
        if let Err(e) = wire::server::builder(&limits)
            .add_service(svc.into_server())
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stop.await;
            })
            .await
        {
            tracing::error!(error = %e, "sidecar service stopped");
        }
    });
    Ok((server, bound))
}
