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

use bft::shell::{Delivery, ShellConfig, ShellDeps, ShellStatus};
use bft::{Decision, Digest, FileWal, NullApp, Output, Refusal, Replica, ReplicaId};
use tokio::sync::{mpsc, watch};
use tracing::info;

use crate::decisions::DecisionLog;
use crate::keys::{ClusterKeys, EngineSigner, EngineVerifier, NodeKeys};
use crate::peers::Peers;
use crate::service::{ConsensusService, ServiceDeps, ServiceLimits};
use crate::submit::{SubmitLimits, Waiters};
use crate::transport::{GrpcTransport, MAX_MESSAGE_BYTES, QueueLimits, Stats, TransportConfig};
use crate::{Error, Result};

/// The node's resource bounds (docs/bft.md "Limits"). `Default` holds the defaults
/// of `fabrx node bft`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLimits {
    /// Outgoing messages kept per peer while it is slow or down.
    pub peer_queue_messages: std::num::NonZeroUsize,
    /// Outgoing bytes kept per peer.
    pub peer_queue_bytes: usize,
    /// Outgoing bytes kept over all peers.
    pub total_queue_bytes: usize,
    /// Verified inbound bytes per sender waiting for the replica.
    pub inbound_bytes_per_peer: std::num::NonZeroUsize,
    /// Bytes of undecided client requests waiting in `Submit` at once.
    pub submit_bytes: usize,
    /// Clients waiting in `Submit` at once.
    pub submit_waiting: usize,
    /// How long `Submit` waits for the decision.
    pub submit_timeout: Duration,
    /// Open gRPC connections at once.
    pub max_connections: std::num::NonZeroUsize,
    /// A connection that sends nothing this long is closed.
    pub idle_timeout: Duration,
    /// Concurrent HTTP/2 streams (calls) per connection.
    pub max_streams_per_connection: u32,
}

impl Default for NodeLimits {
    fn default() -> NodeLimits {
        NodeLimits {
            peer_queue_messages: std::num::NonZeroUsize::new(4096).unwrap_or(std::num::NonZeroUsize::MIN),
            peer_queue_bytes: 32 << 20,
            total_queue_bytes: 96 << 20,
            inbound_bytes_per_peer: std::num::NonZeroUsize::new(32 << 20)
                .unwrap_or(std::num::NonZeroUsize::MIN),
            submit_bytes: 64 << 20,
            submit_waiting: 10_000,
            submit_timeout: Duration::from_secs(30),
            max_connections: std::num::NonZeroUsize::new(1024).unwrap_or(std::num::NonZeroUsize::MIN),
            idle_timeout: Duration::from_secs(120),
            max_streams_per_connection: 64,
        }
    }
}

/// Everything one replica needs.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// Engine settings (`id`, `n` and timers).
    pub engine: bft::Config,
    /// `host:port` of every replica (index = replica id); this replica listens on
    /// its own entry.
    pub peers: Vec<String>,
    /// Where this replica's key and the cluster's public keys come from.
    pub keys: NodeKeys,
    /// The chain name; with the public keys it makes the chain id bound into every
    /// signature (`fabrx node bft --chain-id`).
    pub chain: String,
    /// WAL directory (a journal).
    pub wal: PathBuf,
    /// Decisions log directory (a journal of JSON records).
    pub decisions: PathBuf,
    /// Clock tick of the shell.
    pub tick: Duration,
    /// Resource bounds.
    pub limits: NodeLimits,
    /// Capacity of the request and decision channels (the replica's input queue of
    /// peer messages is smaller; peer bytes are bounded by `inbound_bytes_per_peer`).
    pub channel_capacity: usize,
}

/// Capacity of the replica's input queue of peer messages: every message in it may
/// be as large as `MAX_MESSAGE_BYTES`, so it is short.
const NET_QUEUE: usize = 8;

/// Checks that the engine's byte bounds fit the transport's message limit: a
/// state-transfer response and a new-view proof (a quorum of view changes, each with
/// a prepared proposal) must be sendable.
fn check_sizes(cfg: &ReplicaConfig) -> Result<()> {
    let e = &cfg.engine;
    let decision = e
        .max_batch_bytes
        .max(e.max_request_bytes)
        .saturating_add(64 << 10);
    let new_view = decision.saturating_mul(e.quorum().q as usize);
    let sync = e.sync_max_bytes.max(decision);
    if new_view > MAX_MESSAGE_BYTES || sync > MAX_MESSAGE_BYTES {
        return Err(Error::Config {
            reason: format!(
                "a new view ({new_view} bytes) or a state-transfer response ({sync} bytes) would exceed the \
                 transport's {MAX_MESSAGE_BYTES}-byte message limit: lower the batch or sync byte bounds"
            ),
        });
    }
    Ok(())
}

/// Validates the configuration and loads the keys; the engine's chain id is set from
/// the chain name and the keys.
pub(crate) fn checked(
    mut cfg: ReplicaConfig,
) -> Result<(ReplicaConfig, SocketAddr, crypto::SigningKey, ClusterKeys)> {
    let me: ReplicaId = cfg.engine.id;
    let n = u32::try_from(cfg.peers.len()).unwrap_or(u32::MAX);
    // A joining replica (`NodeKeys::Joining`) starts outside the genesis set: engine id
    // I ≥ N of the genesis set of N, with a link to each of the I + 1 replicas.
    let joining =
        matches!(cfg.keys, NodeKeys::Joining { .. }) && me >= cfg.engine.n() && Some(n) == me.checked_add(1);
    if !joining && (n != cfg.engine.n() || me >= n) {
        return Err(Error::Config {
            reason: format!("replica {me} of {} peers, engine n = {}", n, cfg.engine.n()),
        });
    }
    let listen: SocketAddr = cfg.peers[me as usize].parse().map_err(|_| Error::Config {
        reason: format!("listen address {:?} is not ip:port", cfg.peers[me as usize]),
    })?;
    check_sizes(&cfg)?;
    let (key, keys) = cfg.keys.load(me, cfg.engine.n())?;
    let keys = keys.with_chain(&cfg.chain);
    cfg.engine.chain = keys.chain_id();
    Ok((cfg, listen, key, keys))
}

/// Validates the config, restores the replica from its WAL and log, binds its server and
/// starts it. It runs until a component fails (a WAL or log write error stops it) or
/// the handle's `stop`.
pub async fn spawn(cfg: ReplicaConfig) -> Result<Handle> {
    let (cfg, listen, key, keys) = checked(cfg)?;
    let (replica, wal, log) = restore(&cfg, key.clone(), keys.clone())?;
    let peers = Arc::new(Peers::new(keys.clone(), cfg.peers.clone()));
    let node = launch(Launch {
        cfg,
        listen,
        key,
        keys,
        peers,
        replica,
        wal,
        sink: log,
        decisions: None,
        request_check: None,
        config_source: None,
        metrics: crate::metrics::Metrics::register(&telemetry::Registry::detached("consenter"))?,
    })
    .await?;
    Ok(node)
}

/// [`spawn`], then runs until a component fails (the error it failed with).
pub async fn run(cfg: ReplicaConfig) -> Result<()> {
    use wire::node::Node as _;
    spawn(cfg).await?.failed().await
}

/// What the decisions writer thread does with each decision the engine delivered, in
/// order, before the clients waiting for its requests are answered.
pub(crate) trait DecisionSink: Send + 'static {
    /// Records decision `d` (the next one; re-deliveries are the sink's to skip).
    fn decided(&mut self, d: &Arc<Decision>) -> Result<()>;
    /// The application installed a state-transfer snapshot after decision `seq`.
    fn installed(&mut self, seq: u64) -> Result<()>;
    /// The writer's queue ran empty: a moment to flush.
    fn idle(&mut self) -> Result<()>;
    /// Makes every recorded decision durable (the engine is about to write a checkpoint
    /// that lets its WAL drop them).
    fn durable(&mut self) -> Result<()>;
}

impl DecisionSink for DecisionLog {
    fn decided(&mut self, d: &Arc<Decision>) -> Result<()> {
        self.append(d)
    }
    fn installed(&mut self, seq: u64) -> Result<()> {
        // `NullApp` without snapshots never installs one: this log is the ledger.
        Err(Error::Diverged {
            decision: seq,
            reason: "a snapshot was installed, but this node keeps every decision".into(),
        })
    }
    fn idle(&mut self) -> Result<()> {
        self.flush()
    }
    fn durable(&mut self) -> Result<()> {
        self.sync()
    }
}

/// A restored replica and what the node serves beside it.
pub(crate) struct Launch<A: bft::Application, S> {
    /// The checked configuration.
    pub cfg: ReplicaConfig,
    /// Where to listen.
    pub listen: SocketAddr,
    /// This replica's key.
    pub key: crypto::SigningKey,
    /// The cluster's keys (with the chain id).
    pub keys: ClusterKeys,
    /// The replicas the transport links to, growing with the set in force.
    pub peers: Arc<Peers>,
    /// The restored replica.
    pub replica: Replica<A>,
    /// Its WAL.
    pub wal: FileWal,
    /// Where decisions go.
    pub sink: S,
    /// The `Consenter` service (Arma mode).
    pub decisions:
        Option<wire::pb::consenter_server::ConsenterServer<crate::decisions_service::DecisionsService>>,
    /// The application's check of a submitted request, run before it is queued.
    pub request_check: Option<crate::service::RequestCheck>,
    /// The network config in force, for `Status` with `with_config`.
    pub config_source: Option<crate::service::ConfigSource>,
    /// Where the replica's state and the transport counters are sampled each second.
    pub metrics: crate::metrics::Metrics,
}

/// A running replica (of the plain cluster or of the consenters).
pub struct Handle {
    /// The address the gRPC server is bound to.
    pub listen: SocketAddr,
    /// The engine's shell task, until it was awaited.
    shell: wire::node::Task<bft::Result<()>>,
    /// The gRPC server (taken by `stop`).
    serving: Option<wire::node::Serving>,
    /// Ends when the decisions writer thread ended (with its result), until awaited.
    writer: wire::node::Task<Result<()>>,
    /// Why it stopped, once `failed` saw it.
    ended: Option<String>,
    /// The replicas it links to: they say when a config removed this node's party.
    peers: Arc<Peers>,
}

/// Resolves when the server ends on its own (never once it was taken).
async fn serving_ended(
    serving: &mut Option<wire::node::Serving>,
) -> std::result::Result<(), wire::node::ServeError> {
    match serving.as_mut() {
        Some(s) => s.ended().await,
        None => std::future::pending().await,
    }
}

impl Handle {
    /// Waits for the first component to stop: the shell, the server or the decisions
    /// writer. The node never stops on its own, so that is an error (the component's
    /// own, or `Stopped`).
    async fn first_failure(&mut self) -> Error {
        let shell = async {
            match self.shell.join().await {
                Ok(Err(e)) => Error::from(e),
                _ => Error::Stopped { what: "replica task" },
            }
        };
        let writer = async {
            match self.writer.join().await {
                Ok(Err(e)) => e,
                _ => Error::Stopped {
                    what: "decisions writer",
                },
            }
        };
        let peers = Arc::clone(&self.peers);
        // A non-member from that decision on, it still sends what it queued (its commit
        // vote for the very decision), answers state transfer and serves its decisions
        // for a while before it stops.
        let left = async move {
            let party = peers.left().await;
            tokio::time::sleep(std::time::Duration::from_millis(arma::LEAVE_GRACE_MS)).await;
            Error::PartyLeft { party }
        };
        tokio::select! {
            e = left => e,
            e = shell => e,
            r = serving_ended(&mut self.serving) => match r {
                Err(e) => Error::Server { reason: e.reason },
                Ok(()) => Error::Stopped { what: "grpc server" },
            },
            e = writer => e,
        }
    }
}

impl wire::node::Node for Handle {
    type Error = Error;

    fn addr(&self) -> SocketAddr {
        self.listen
    }

    async fn failed(&mut self) -> Result<()> {
        if self.ended.is_none() {
            let e = self.first_failure().await;
            self.ended = Some(e.to_string());
            return Err(e);
        }
        Err(Error::Stopped { what: "consenter" })
    }

    /// Stops the engine, cuts the server's connections (peer and decision streams are
    /// long-lived) and waits for the decisions writer, which flushes and ends once the
    /// engine's decisions channel closed; returns the writer's error if it had one. A
    /// WAL sync the engine had handed to a blocking thread may finish just after.
    async fn stop(mut self) -> Result<()> {
        let _ = self.shell.finish(std::time::Duration::ZERO).await;
        if let Some(serving) = self.serving.take() {
            serving.stop(std::time::Duration::ZERO).await;
        }
        match self.writer.wait().await {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::Stopped {
                what: "decisions writer",
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Handle {
    /// A handle dropped without `stop` still stops the engine (it does not wait).
    fn drop(&mut self) {
        self.shell.abort();
    }
}

/// Binds the server and starts the transport, the decisions writer and the shell.
pub(crate) async fn launch<A, S>(l: Launch<A, S>) -> Result<Handle>
where
    A: bft::Application + Send + 'static,
    S: DecisionSink,
{
    let cfg = &l.cfg;
    let me = cfg.engine.id;
    let epoch = crate::epoch::next_boot_epoch(&cfg.wal.with_extension("epoch"))?;
    let limits = &cfg.limits;
    let stats = Arc::new(Stats::default());
    let (tx_inbound, rx_inbound) = mpsc::channel(cfg.channel_capacity);
    let (tx_net, rx_net) = mpsc::channel(NET_QUEUE);
    tokio::spawn(crate::service::forward_inbound(rx_inbound, tx_net));
    let (tx_requests, rx_requests) = mpsc::channel(cfg.channel_capacity);
    let (tx_decisions, rx_decisions) = mpsc::channel(cfg.channel_capacity);
    let (tx_refused, rx_refused) = mpsc::channel(cfg.channel_capacity);
    let (tx_status, rx_status) = watch::channel(ShellStatus::of(&l.replica));
    let waiters = Waiters::new(SubmitLimits {
        max_bytes: limits.submit_bytes,
        max_waiting: limits.submit_waiting,
    });
    tokio::spawn(answer_refusals(rx_refused, waiters.clone()));
    let transport = spawn_transport(cfg, epoch, l.key, l.keys, stats.clone());
    l.peers.attach(transport.clone());
    let left_signal = Arc::clone(&l.peers);
    tokio::spawn(sample_metrics(l.metrics, tx_status.subscribe(), stats.clone()));
    let mut service = ConsensusService::new(ServiceDeps {
        me,
        peers: l.peers,
        tx_inbound,
        tx_requests,
        rx_status,
        stats,
        waiters: waiters.clone(),
        limits: ServiceLimits {
            max_request_bytes: cfg.engine.max_request_bytes,
            submit_timeout: limits.submit_timeout,
            inbound_bytes_per_peer: limits.inbound_bytes_per_peer,
        },
    });
    if let Some(check) = l.request_check {
        service = service.with_request_check(check);
    }
    if let Some(source) = l.config_source {
        service = service.with_config_source(source);
    }
    let serving = serve(me, l.listen, service, l.decisions, limits).await?;
    let listen = serving.addr();
    let sink = l.sink;
    let writer = std::thread::Builder::new()
        .name(format!("decisions-{me}"))
        .spawn(move || write_decisions(sink, rx_decisions, &waiters))
        .map_err(|e| Error::Io {
            path: "decisions writer thread".into(),
            source: e,
        })?;
    let shell = bft::shell::spawn(
        ShellConfig { me, tick: cfg.tick },
        ShellDeps {
            replica: l.replica,
            wal: l.wal,
            transport,
            rx_net,
            rx_requests,
            tx_decisions,
            tx_status: Some(tx_status),
            tx_refused: Some(tx_refused),
        },
    );
    let writer = tokio::task::spawn_blocking(move || {
        writer.join().unwrap_or(Err(Error::Stopped {
            what: "decisions writer",
        }))
    });
    Ok(Handle {
        listen,
        shell: wire::node::Task::new(shell),
        serving: Some(serving),
        writer: wire::node::Task::new(writer),
        ended: None,
        peers: left_signal,
    })
}

/// Samples the replica's status and the transport counters into `m` each second, until
/// the shell drops its status sender.
async fn sample_metrics(m: crate::metrics::Metrics, mut rx: watch::Receiver<ShellStatus>, stats: Arc<Stats>) {
    let mut seen = crate::metrics::Seen::default();
    let mut tick = tokio::time::interval(METRICS_SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let status = *rx.borrow_and_update();
        seen = m.sample(&status, &stats, seen);
        if rx.has_changed().is_err() {
            return;
        }
    }
}

/// How often [`sample_metrics`] runs.
const METRICS_SAMPLE: Duration = Duration::from_secs(1);

/// The outgoing peer links.
fn spawn_transport(
    cfg: &ReplicaConfig,
    epoch: u64,
    key: crypto::SigningKey,
    keys: ClusterKeys,
    stats: Arc<Stats>,
) -> GrpcTransport {
    let limits = &cfg.limits;
    let (transport, _links) = GrpcTransport::spawn(
        TransportConfig {
            me: cfg.engine.id,
            peers: cfg.peers.clone(),
            limits: QueueLimits {
                messages_per_peer: limits.peer_queue_messages,
                bytes_per_peer: limits.peer_queue_bytes,
                total_bytes: limits.total_queue_bytes,
            },
            epoch,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
            // Over mutual TLS the receiver knows the sender from its certificate.
            sign_envelopes: wire::tls::installed().is_none(),
        },
        key,
        keys,
        stats,
    );
    transport
}

/// The replica restored from its WAL, with the decisions log caught up: decisions the
/// log lost (a crash before the write) come back from the WAL.
fn restore(
    cfg: &ReplicaConfig,
    key: crypto::SigningKey,
    keys: ClusterKeys,
) -> Result<(Replica<NullApp>, FileWal, DecisionLog)> {
    let (mut wal, entries) = FileWal::open(&cfg.wal)?;
    let mut log = DecisionLog::open(&cfg.decisions)?;
    if entries.is_empty() && log.last() > 0 {
        return Err(Error::Config {
            reason: format!(
                "the WAL {} is missing or empty but the decisions log {} holds decisions up to seq {}: \
                 a fresh replica could vote again on what it decided; restore the WAL (or remove both \
                 to rejoin as a new replica by state transfer)",
                cfg.wal.display(),
                cfg.decisions.display(),
                log.last()
            ),
        });
    }
    // No snapshots: this node's decisions log is its ledger and must hold every
    // decision, so the engine never replaces decisions by a checkpoint here.
    let app = NullApp {
        applied: log.last(),
        requests: 0,
        snapshots: false,
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
        match out {
            // A replica-set switch the replay made is durable before what follows it.
            Output::Persist(e) => bft::Wal::append(&mut wal, std::slice::from_ref(e))?,
            Output::Deliver(d) => log.append(d)?,
            _ => {}
        }
    }
    log.flush()?;
    info!(
        id = cfg.engine.id,
        n = cfg.engine.n(),
        wal_entries = entries.len(),
        decided = replica.last_decided(),
        view = replica.view(),
        "replica restored"
    );
    // The decoded entries are not needed once the replica is rebuilt (it keeps what it
    // needs, sharing the decisions): free them now rather than at the end of `run`.
    drop(entries);
    Ok((replica, wal, log))
}

/// Binds `listen` and serves the consensus service (and, in Arma mode, the `Consenter`
/// service) on it with the connection-level limits every fabrx server has
/// (`wire::server`: bounded connections, idle timeout, streams per connection, HTTP/2
/// windows; docs/limits.md).
async fn serve(
    me: ReplicaId,
    listen: SocketAddr,
    service: ConsensusService,
    decisions: Option<
        wire::pb::consenter_server::ConsenterServer<crate::decisions_service::DecisionsService>,
    >,
    limits: &NodeLimits,
) -> Result<wire::node::Serving> {
    let listen_error = |e: wire::node::ListenError| Error::Io {
        path: format!("listen {}", e.addr),
        source: std::io::Error::other(e.reason),
    };
    let listener = wire::node::bind(listen).await.map_err(listen_error)?;
    let server_limits = wire::server::ServerLimits {
        max_connections: limits.max_connections.get(),
        idle_timeout: limits.idle_timeout,
        max_concurrent_streams: limits.max_streams_per_connection,
        ..wire::server::ServerLimits::default()
    };
    let serving = wire::node::serve(listener, &server_limits, |b| {
        b.add_service(service.into_server())
            .add_optional_service(decisions)
    })
    .map_err(listen_error)?;
    info!(id = me, listen = %serving.addr(), "consensus service listening");
    Ok(serving)
}

/// Answers the clients waiting for requests the replica refused.
async fn answer_refusals(mut rx: mpsc::Receiver<(Digest, Refusal)>, waiters: Arc<Waiters>) {
    while let Some((digest, reason)) = rx.recv().await {
        waiters.refused(digest, reason);
    }
}

/// The decisions writer thread: appends each decision in order, answers the clients
/// waiting for its requests (the decision is already in the WAL), flushes whenever
/// the queue runs empty.
fn write_decisions<S: DecisionSink>(
    mut sink: S,
    mut rx: mpsc::Receiver<Delivery>,
    waiters: &Waiters,
) -> Result<()> {
    while let Some(delivery) = rx.blocking_recv() {
        match delivery {
            Delivery::Decided(d) => {
                sink.decided(&d)?;
                waiters.decided(&d);
            }
            // The replica dropped its pending requests: their clients must resubmit.
            Delivery::Installed { seq } => {
                sink.installed(seq)?;
                waiters.skipped(seq);
            }
            Delivery::Durable(done) => {
                sink.durable()?;
                let _ = done.send(());
            }
        }
        if rx.is_empty() {
            sink.idle()?;
        }
    }
    sink.idle()
}
