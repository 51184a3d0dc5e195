//! One consenter replica as a process: file WAL, decisions log, the engine shell,
//! the gRPC service (peer streams, submit, status) and the outgoing peer links.
//!
//! The application is the simplest honest one: it orders opaque client requests and
//! nothing else (`bft::NullApp`: non-empty requests, empty metadata). Its durable
//! state is the decisions log, whose last sequence number is the height it applied.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bft::shell::{ShellConfig, ShellDeps, ShellStatus};
use bft::{Decision, FileWal, NullApp, Output, Replica, ReplicaId};
use tokio::sync::{mpsc, watch};
use tracing::info;

use crate::decisions::DecisionLog;
use crate::keys::{ClusterKeys, EngineSigner, EngineVerifier, NodeKeys};
use crate::service::{ConsensusService, ServiceDeps};
use crate::transport::{GrpcTransport, Stats, TransportConfig};
use crate::{Error, Result};

/// Everything one replica needs.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Engine settings (`id`, `n` and timers).
    pub engine: bft::Config,
    /// `host:port` of every replica (index = replica id); this replica listens on
    /// its own entry.
    pub peers: Vec<String>,
    /// Where this replica's key and the cluster's public keys come from.
    pub keys: NodeKeys,
    /// WAL directory (a journal).
    pub wal: PathBuf,
    /// Decisions log directory (a journal of JSON records).
    pub decisions: PathBuf,
    /// Clock tick of the shell.
    pub tick: Duration,
    /// Messages kept per peer while it is slow or down.
    pub peer_queue: usize,
    /// Capacity of the inbound message, request and decision channels.
    pub channel_capacity: usize,
}

/// Runs the replica until a component fails (a WAL or log write error stops it).
pub async fn run(cfg: NodeConfig) -> Result<()> {
    let me: ReplicaId = cfg.engine.id;
    let n = u32::try_from(cfg.peers.len()).unwrap_or(u32::MAX);
    if n != cfg.engine.n || me >= n {
        return Err(Error::Config {
            reason: format!("replica {me} of {} peers, engine n = {}", n, cfg.engine.n),
        });
    }
    let listen: SocketAddr = cfg.peers[me as usize].parse().map_err(|_| Error::Config {
        reason: format!("listen address {:?} is not ip:port", cfg.peers[me as usize]),
    })?;
    let (key, keys) = cfg.keys.load(me, n)?;
    let (replica, wal, log) = restore(&cfg, key.clone(), keys.clone())?;

    let stats = Arc::new(Stats::default());
    let (tx_net, rx_net) = mpsc::channel(cfg.channel_capacity);
    let (tx_requests, rx_requests) = mpsc::channel(cfg.channel_capacity);
    let (tx_decisions, rx_decisions) = mpsc::channel(cfg.channel_capacity);
    let (tx_status, rx_status) = watch::channel(ShellStatus::of(&replica));
    let (transport, _links) = GrpcTransport::spawn(
        TransportConfig {
            me,
            peers: cfg.peers.clone(),
            queue_capacity: cfg.peer_queue,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
        },
        key,
        keys.clone(),
        stats.clone(),
    );
    let service = ConsensusService::new(ServiceDeps {
        me,
        keys,
        tx_net,
        tx_requests,
        rx_status,
        stats,
        max_request_bytes: cfg.engine.max_request_bytes,
    });
    let server = serve(me, listen, service).await?;
    let writer = std::thread::Builder::new()
        .name(format!("decisions-{me}"))
        .spawn(move || write_decisions(log, rx_decisions))
        .map_err(|e| Error::Io {
            path: "decisions writer thread".into(),
            source: e,
        })?;
    let shell = bft::shell::spawn(
        ShellConfig { me, tick: cfg.tick },
        ShellDeps {
            replica,
            wal,
            transport,
            rx_net,
            rx_requests,
            tx_decisions,
            tx_status: Some(tx_status),
        },
    );
    tokio::select! {
        r = shell => {
            r.map_err(|_| Error::Stopped { what: "replica task" })??;
            Err(Error::Stopped { what: "replica task" })
        }
        r = server => {
            r.map_err(|_| Error::Stopped { what: "grpc server" })?
                .map_err(|e| Error::Server { reason: e.to_string() })?;
            Err(Error::Stopped { what: "grpc server" })
        }
        r = tokio::task::spawn_blocking(move || writer.join()) => {
            match r {
                Ok(Ok(Err(e))) => Err(e),
                _ => Err(Error::Stopped { what: "decisions writer" }),
            }
        }
    }
}

/// The replica restored from its WAL, with the decisions log caught up: decisions the
/// log lost (a crash before the write) come back from the WAL.
fn restore(
    cfg: &NodeConfig,
    key: crypto::SigningKey,
    keys: ClusterKeys,
) -> Result<(Replica<NullApp>, FileWal, DecisionLog)> {
    let (wal, entries) = FileWal::open(&cfg.wal)?;
    let mut log = DecisionLog::open(&cfg.decisions)?;
    let app = NullApp {
        applied: log.last(),
        requests: 0,
    };
    let verifier = Arc::new(EngineVerifier::new(keys));
    let (replica, replayed) = Replica::restore(
        cfg.engine.clone(),
        app,
        Box::new(EngineSigner::new(key)),
        verifier,
        &entries,
    )?;
    for out in &replayed {
        if let Output::Deliver(d) = out {
            log.append(d)?;
        }
    }
    log.flush()?;
    info!(
        id = cfg.engine.id,
        n = cfg.engine.n,
        wal_entries = entries.len(),
        decided = replica.last_decided(),
        view = replica.view(),
        "replica restored"
    );
    Ok((replica, wal, log))
}

type ServerTask = tokio::task::JoinHandle<std::result::Result<(), tonic::transport::Error>>;

/// Binds `listen` and serves the consensus service on it.
async fn serve(me: ReplicaId, listen: SocketAddr, service: ConsensusService) -> Result<ServerTask> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Error::Io {
            path: format!("listen {listen}"),
            source: e,
        })?;
    info!(id = me, %listen, "consensus service listening");
    Ok(tokio::spawn(
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(service.into_server())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    ))
}

/// The decisions writer thread: appends each decision in order, flushes whenever the
/// queue runs empty.
fn write_decisions(mut log: DecisionLog, mut rx: mpsc::Receiver<Arc<Decision>>) -> Result<()> {
    while let Some(d) = rx.blocking_recv() {
        log.append(&d)?;
        if rx.is_empty() {
            log.flush()?;
        }
    }
    log.flush()
}
