//! A thin tokio shell around the pure [`Replica`]: one task that feeds it clock ticks,
//! peer messages and client requests, makes `Persist` entries durable (on a blocking
//! thread) before executing the outputs that follow them, hands messages to a
//! [`Transport`] and decisions to a bounded channel.
//!
//! Only this module uses tokio; it is behind the `shell` cargo feature (on by default)
//! so the core can be built without it (`default-features = false`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::app::Application;
use crate::certificate::Decision;
use crate::messages::Message;
use crate::replica::{Input, Output, Refusal, Replica};
use crate::types::Digest;
use crate::types::ReplicaId;
use crate::wal::{Wal, WalEntry};
use crate::{Error, Result};

/// Delivers messages to peers. Best effort: the protocol retransmits, so a transport
/// may drop a message when a peer's queue is full rather than block the replica.
pub trait Transport: Send + Sync + 'static {
    /// Sends `msg` to replica `to`.
    fn send(&self, to: ReplicaId, msg: Message);
    /// Sends `msg` to every replica but `me`. The default clones it per peer; a
    /// transport that encodes messages can override it to encode once.
    fn broadcast(&self, me: ReplicaId, msg: Message) {
        for to in (0..self.n()).filter(|t| *t != me) {
            self.send(to, msg.clone());
        }
    }
    /// Number of replicas (broadcast goes to all but `me`).
    fn n(&self) -> u32;
}

/// Shell settings.
#[derive(Clone, Debug)]
pub struct ShellConfig {
    /// This replica (broadcasts skip it).
    pub me: ReplicaId,
    /// The shortest time between two `Input::Tick`s. The replica hears the time when
    /// it may act on it (`Replica::next_deadline`), so this bounds how often a deadline
    /// it cannot act on yet wakes it, and how late past its deadline it may act.
    pub tick: Duration,
}

/// What the replica looks like from outside, published after every input that
/// changed it (for status endpoints and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShellStatus {
    /// Current (last installed) view.
    pub view: crate::types::View,
    /// Leader of that view.
    pub leader: ReplicaId,
    /// Highest decided sequence number.
    pub last_decided: crate::types::Seq,
    /// True while the replica waits for a new view.
    pub view_changing: bool,
    /// Requests waiting to be ordered.
    pub pending: usize,
    /// The replica set's epoch (config updates applied since the first set).
    pub epoch: u64,
    /// Replicas in the set in force.
    pub members: u32,
    /// Whether this replica is one of them.
    pub member: bool,
}

impl ShellStatus {
    /// The status of `replica` now.
    pub fn of<A: Application>(replica: &Replica<A>) -> ShellStatus {
        ShellStatus {
            view: replica.view(),
            leader: replica.config().leader(replica.view()),
            last_decided: replica.last_decided(),
            view_changing: replica.status() != crate::replica::Status::Normal,
            pending: replica.pending_len(),
            epoch: replica.app().epoch(),
            members: replica.config().n(),
            member: replica.is_member(),
        }
    }
}

/// What the shell task drives and talks to.
pub struct ShellDeps<A: Application, W, T> {
    /// The state machine (fresh or restored from `wal`).
    pub replica: Replica<A>,
    /// Its write-ahead log.
    pub wal: W,
    /// Outgoing messages.
    pub transport: T,
    /// Incoming peer messages `(from, msg)`; `from` authenticated by the transport.
    pub rx_net: mpsc::Receiver<(ReplicaId, Message)>,
    /// Incoming client requests.
    pub rx_requests: mpsc::Receiver<Vec<u8>>,
    /// Decisions (and snapshot installs) in order (bounded: a slow consumer slows the
    /// replica down).
    pub tx_decisions: mpsc::Sender<Delivery>,
    /// Where to publish [`ShellStatus`] changes, if anyone listens.
    pub tx_status: Option<tokio::sync::watch::Sender<ShellStatus>>,
    /// Client requests the replica did not take (`Output::Refused`), if anyone
    /// listens; bounded, and dropped when full (the client's deadline covers it).
    pub tx_refused: Option<mpsc::Sender<(Digest, Refusal)>>,
}

/// What the shell hands on, in decision order.
#[derive(Debug)]
pub enum Delivery {
    /// A decision, already applied to the application.
    Decided(Arc<Decision>),
    /// The application installed a state-transfer snapshot after decision `seq`; the
    /// decisions up to it are not delivered (the consumer persists the new state).
    Installed {
        /// The decision the snapshot follows.
        seq: crate::Seq,
    },
    /// A stable checkpoint is about to be written, after which the WAL no longer holds
    /// the decisions up to it: make every decision delivered before this message durable,
    /// then answer. The shell writes the checkpoint only after the answer (or once the
    /// sender is dropped: a consumer that keeps no decisions has nothing to make
    /// durable). Without it a crash could leave a checkpoint on disk and the consumer's
    /// record of the decisions below it lost, and a restart would not deliver them again.
    Durable(tokio::sync::oneshot::Sender<()>),
}

/// Spawns the shell task. It ends when both input channels are closed, or with an
/// error when the WAL cannot be written (never continue without durability).
pub fn spawn<A, W, T>(cfg: ShellConfig, deps: ShellDeps<A, W, T>) -> JoinHandle<Result<()>>
where
    A: Application + Send + 'static,
    W: Wal + Send + 'static,
    T: Transport,
{
    tokio::spawn(run(cfg, deps))
}

async fn run<A, W, T>(cfg: ShellConfig, deps: ShellDeps<A, W, T>) -> Result<()>
where
    A: Application + Send + 'static,
    W: Wal + Send + 'static,
    T: Transport,
{
    let ShellDeps {
        mut replica,
        wal,
        transport,
        mut rx_net,
        mut rx_requests,
        tx_decisions,
        tx_status,
        tx_refused,
    } = deps;
    let mut wal = Some(wal);
    let start = Instant::now();
    let clock = || u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    // The replica hears the time at its next deadline (at most once per `tick`, at
    // least once per `IDLE_TICK`), not on a fixed beat, and its clock moves before
    // every input.
    let mut last_tick = Instant::now();
    let wake = tokio::time::sleep_until(wake_at(&cfg, &replica, start, last_tick));
    tokio::pin!(wake);
    loop {
        let input = tokio::select! {
            _ = &mut wake => {
                last_tick = Instant::now();
                Input::Tick(clock())
            }
            Some((from, msg)) = rx_net.recv() => Input::Message { from, msg },
            Some(request) = rx_requests.recv() => Input::Request(request),
            else => return Ok(()),
        };
        let before = ShellStatus::of(&replica);
        replica.advance_clock(clock());
        let outputs = replica.handle(input);
        let sinks = Sinks {
            tx_decisions: &tx_decisions,
            tx_refused: tx_refused.as_ref(),
        };
        execute(&cfg, outputs, &mut wal, &transport, sinks).await?;
        let now = ShellStatus::of(&replica);
        if now != before {
            log_change(cfg.me, &before, &now, &replica);
        }
        if let Some(tx) = &tx_status {
            tx.send_if_modified(|s| std::mem::replace(s, now) != now);
        }
        let at = wake_at(&cfg, &replica, start, last_tick);
        if at != wake.deadline() {
            wake.as_mut().reset(at);
        }
    }
}

/// The longest a replica goes without hearing the time.
const IDLE_TICK: Duration = Duration::from_secs(1);

/// When to tick next: at the replica's next deadline, but not sooner than `tick` after
/// the last tick (a deadline it cannot act on yet never spins) and not later than
/// `IDLE_TICK` from now.
fn wake_at<A: Application>(
    cfg: &ShellConfig,
    replica: &Replica<A>,
    start: Instant,
    last_tick: Instant,
) -> Instant {
    let now = Instant::now();
    let due = start + Duration::from_millis(replica.next_deadline());
    due.min(now + IDLE_TICK).max(last_tick + cfg.tick)
}

/// Logs view changes (with the complaint that started them) and installed views.
fn log_change<A: Application>(me: ReplicaId, before: &ShellStatus, now: &ShellStatus, replica: &Replica<A>) {
    if now.view_changing && !before.view_changing {
        let (target, reason) = replica
            .last_complaint()
            .unwrap_or((now.view + 1, crate::Complaint::Joined));
        tracing::warn!(
            id = me,
            view = now.view,
            target,
            ?reason,
            backoff = replica.backoff(),
            decided = now.last_decided,
            "view change started"
        );
    } else if now.view != before.view {
        tracing::info!(
            id = me,
            view = now.view,
            leader = now.leader,
            decided = now.last_decided,
            "view installed"
        );
    }
}

/// Where decisions and refusals go.
#[derive(Clone, Copy)]
struct Sinks<'a> {
    tx_decisions: &'a mpsc::Sender<Delivery>,
    tx_refused: Option<&'a mpsc::Sender<(Digest, Refusal)>>,
}

/// Executes outputs in order; consecutive `Persist` entries are appended (and synced)
/// together, always before the first output that follows them.
async fn execute<W: Wal + Send + 'static, T: Transport>(
    cfg: &ShellConfig,
    outputs: Vec<Output>,
    wal: &mut Option<W>,
    transport: &T,
    sinks: Sinks<'_>,
) -> Result<()> {
    let mut batch: Vec<WalEntry> = Vec::new();
    for out in outputs {
        if let Output::Persist(e) = out {
            if matches!(e, WalEntry::Checkpoint { .. }) {
                durable(sinks).await?;
            }
            batch.push(e);
            continue;
        }
        flush(wal, &mut batch).await?;
        match out {
            Output::Send { to, msg } => transport.send(to, msg),
            Output::Broadcast(msg) => transport.broadcast(cfg.me, msg),
            Output::Deliver(d) => sinks
                .tx_decisions
                .send(Delivery::Decided(d))
                .await
                .map_err(|_| Error::ChannelClosed { what: "decisions" })?,
            Output::Installed { seq, .. } => sinks
                .tx_decisions
                .send(Delivery::Installed { seq })
                .await
                .map_err(|_| Error::ChannelClosed { what: "decisions" })?,
            Output::Refused { request, reason } => {
                if let Some(tx) = sinks.tx_refused {
                    // Full: the waiting client learns the outcome at its deadline.
                    let _ = tx.try_send((request, reason));
                }
            }
            Output::ViewInstalled { .. } | Output::Persist(_) => {}
        }
    }
    flush(wal, &mut batch).await
}

/// Waits until the decisions consumer made every decision delivered so far durable.
async fn durable(sinks: Sinks<'_>) -> Result<()> {
    let (done, answered) = tokio::sync::oneshot::channel();
    sinks
        .tx_decisions
        .send(Delivery::Durable(done))
        .await
        .map_err(|_| Error::ChannelClosed { what: "decisions" })?;
    // A dropped sender: the consumer keeps nothing durable.
    let _ = answered.await;
    Ok(())
}

async fn flush<W: Wal + Send + 'static>(wal: &mut Option<W>, batch: &mut Vec<WalEntry>) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let entries = std::mem::take(batch);
    let mut w = wal.take().ok_or(Error::ChannelClosed { what: "wal" })?;
    let (w, result) = tokio::task::spawn_blocking(move || {
        let r = w.append(&entries);
        (w, r)
    })
    .await
    .map_err(|_| Error::ChannelClosed { what: "wal thread" })?;
    *wal = Some(w);
    result
}

/// Sending end of one replica's inbound queue.
type PeerQueue = mpsc::Sender<(ReplicaId, Message)>;

/// In-process network of bounded queues, one per replica. A replica can be
/// re-attached (after a simulated restart) with [`LoopbackNet::attach`].
#[derive(Clone)]
pub struct LoopbackNet {
    capacity: usize,
    queues: Arc<Mutex<Vec<Option<PeerQueue>>>>,
}

impl LoopbackNet {
    /// A network of `n` replicas whose queues hold `capacity` messages each.
    pub fn new(n: u32, capacity: usize) -> LoopbackNet {
        LoopbackNet {
            capacity,
            queues: Arc::new(Mutex::new(vec![None; n as usize])),
        }
    }

    /// Creates (or replaces) replica `me`'s queue; returns its endpoint and receiver.
    pub fn attach(&self, me: ReplicaId) -> (Loopback, mpsc::Receiver<(ReplicaId, Message)>) {
        let (tx, rx) = mpsc::channel(self.capacity);
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = queues.get_mut(me as usize) {
            *slot = Some(tx);
        }
        (
            Loopback {
                me,
                net: self.clone(),
            },
            rx,
        )
    }
}

/// One replica's endpoint on a [`LoopbackNet`].
#[derive(Clone)]
pub struct Loopback {
    me: ReplicaId,
    net: LoopbackNet,
}

impl Transport for Loopback {
    fn send(&self, to: ReplicaId, msg: Message) {
        let queues = self.net.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Some(peer)) = queues.get(to as usize) {
            // Full queue or stopped peer: drop, the protocol retransmits.
            let _ = peer.try_send((self.me, msg));
        }
    }

    fn n(&self) -> u32 {
        self.net.queues.lock().unwrap_or_else(|e| e.into_inner()).len() as u32
    }
}
