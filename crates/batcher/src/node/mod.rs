//! The batcher as a networked node (docs/batcher.md "Shell"): one task owns the core and
//! runs a `tokio::select!` loop over bounded channels, executing its outputs in order.
//!
//! * [`store`] — the batch store and the progress log (journals), the persister thread.
//! * [`served`] — batches served from memory to `Pull` and `Fetch`.
//! * `service` — the `BatcherIntake` (own router) and `BatcherPeer` (other batchers,
//!   assemblers) gRPC services.
//! * `links` — clients: pulling from the primary, acks and forwards to it, submitting
//!   BAFs and complaints to every consenter.
//! * `decisions` — following the own party's consenter's `Decisions` stream.
//! * `start` — opening the store, rebuilding the core, starting the tasks.
//! * `run` — the loop.
//! * [`metrics`] — [`Stats`], the node's Prometheus metrics.
//!
//! [`Config`] parses no file: the `fabrx node batcher` command fills it from the
//! network configuration.

mod book;
mod checked;
mod decisions;
mod follow;
mod join;
mod links;
pub mod metrics;
mod run;
pub mod served;
mod service;
mod start;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

/// What a node does wrong on purpose: nothing, unless built with the `testing` feature
/// for a multi-process fault test ([`Deps`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    #[cfg(feature = "testing")]
    pub(crate) byzantine: Option<testing::Byzantine>,
    /// A late equivocator's state (`Byzantine::EquivocateLate`).
    #[cfg(feature = "testing")]
    pub(crate) late: Option<Arc<testing::Late>>,
}

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crypto::SigningKey;
use journal::Durability;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use types::PartyId;
use wire::server::ServerLimits;

use crate::{Config as CoreConfig, Error, Result};

pub use decisions::verify_decision;
pub use metrics::Stats;

/// Everything a batcher node needs; validated once by [`spawn`].
#[derive(Clone)]
pub struct Config {
    /// The core's configuration (party, shard, keys, bounds).
    pub batcher: CoreConfig,
    /// This party's batcher signing key (must match `batcher.keys[party]`).
    pub key: SigningKey,
    /// The address to listen on (port 0: any free port, see [`Handle::addr`]); ignored
    /// when [`Deps::listener`] is given.
    pub listen: SocketAddr,
    /// Connection-level limits of the server.
    pub server: ServerLimits,
    /// The data directory (batch store and progress log).
    pub data_dir: PathBuf,
    /// The `BftConsensus` endpoint of every party's consenter (BAFs and complaints go to
    /// all of them), e.g. `http://127.0.0.1:7050`.
    pub consenters: BTreeMap<PartyId, String>,
    /// The `BatcherPeer` endpoint of every party's batcher of this shard (this party's
    /// own entry is not used).
    pub peers: BTreeMap<PartyId, String>,
    /// The `Consenter.Decisions` endpoint of this party's consenter.
    pub own_consenter: String,
    /// The consenter set (keys and chain): every decision's certificate must verify
    /// under it, a quorum of valid signatures proving its headers and term changes
    /// (ADR 0009). `None` trusts the own party's consenter unchecked: only for tests
    /// that script a consenter; `fabrx node batcher` always sets it.
    pub consenter_keys: Option<arma::ClusterKeys>,
    /// The network's config rules: with them the node follows config updates, verifying
    /// each decision under the consenter set in force for it (persisted in the data
    /// directory as `consenter-sets.bin`); without, a decision that puts a new config in
    /// force stops it (docs/reconfiguration.md).
    pub config_rules: Option<Arc<dyn arma::ConfigRules>>,
    /// The shell's own tunables.
    pub shell: ShellConfig,
    /// How the node checks the content of requests it did not admit itself (pulled
    /// batches, forwards); `fabrx node batcher` checks client envelopes as the network's
    /// routers do.
    pub content: RequestContent,
    /// The node's party joins a running network (docs/reconfiguration.md "Adding a
    /// party"): `batcher` is its config in the network that adds it, `consenter_keys` the
    /// genesis set's. A node with no progress yet follows the decisions without a core
    /// until the one that puts a config naming its party in force, then starts there.
    pub joining: bool,
    /// Where the node finds its next signing keys for key rotations (docs/reconfiguration.md
    /// "Rotating a batcher key"): read when a config put in force names another key for
    /// this batcher than the one it signs with, which is taken from the first file that
    /// holds it. Empty: it has none.
    pub next_key_files: Vec<PathBuf>,
}

pub use checked::CheckedRequests;

/// Fingerprints per generation of [`CheckedRequests`]: the requests of the intake a
/// secondary remembers (two generations, about 4 MiB in all) so as not to check them
/// again in the primary's batches.
pub const CHECKED_PER_GENERATION: usize = 1 << 16;

/// How a node checks the content of requests it did not admit itself: the batches it
/// pulls from a primary and the forwards it receives, since a Byzantine primary or peer
/// may send anything (docs/ordering-faults.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RequestContent {
    /// As opaque bytes: sizes, shards and duplicates only (tests of ordering alone).
    #[default]
    Opaque,
    /// As client envelopes, checked as a router checks them (`arma::admission`).
    Envelopes(arma::admission::RequestPolicy),
}

impl RequestContent {
    /// The first request of `requests` whose content is refused, with its index and why.
    pub fn first_refused<'a>(&self, requests: impl IntoIterator<Item = &'a [u8]>) -> Option<(usize, String)> {
        match self {
            RequestContent::Opaque => None,
            RequestContent::Envelopes(policy) => {
                policy.first_refused(requests).map(|(i, e)| (i, e.to_string()))
            }
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("party", &self.batcher.party)
            .field("shard", &self.batcher.shard)
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field("consenters", &self.consenters)
            .field("peers", &self.peers)
            .field("own_consenter", &self.own_consenter)
            .field("shell", &self.shell)
            .finish_non_exhaustive()
    }
}

/// Tunables of the shell (bounds are listed in docs/limits.md).
#[derive(Debug, Clone, Copy)]
pub struct ShellConfig {
    /// The shortest time between two `Input::Tick`s. The core hears the time when it
    /// may act on it (`Batcher::next_deadline`), so this bounds how often a deadline
    /// it cannot act on yet wakes it, and how late past its deadline it may act.
    pub tick: Duration,
    /// Router requests queued for the core, all intake streams together.
    pub intake_queue: NonZeroUsize,
    /// Bytes of the router requests queued for the core, all intake streams together.
    pub intake_queue_bytes: NonZeroUsize,
    /// Requests of one intake stream awaiting their answer (answers queued included).
    pub stream_max_in_flight: NonZeroUsize,
    /// Messages from peers (acks, forwards, pulled batches) queued for the core.
    pub peer_queue: NonZeroUsize,
    /// Acks or forwards queued per destination; beyond it they are dropped (both are
    /// best effort: a lost ack only delays the primary's window until the batch is
    /// ordered, a lost forward is forwarded again in the next round).
    pub peer_send_queue: NonZeroUsize,
    /// BAFs and complaints being submitted to the consenters at once (each call waits
    /// until decided); more wait in a queue of the same size.
    pub submit_concurrency: NonZeroUsize,
    /// How long one round of `Submit` calls waits before it is retried.
    pub submit_timeout: Duration,
    /// First retry delay of a failed call or broken stream (doubling).
    pub backoff_initial: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Batches served from memory (older ones are read from the store by `Fetch`).
    pub served_batches: NonZeroUsize,
    /// Durability of the batch store and the progress log. The node syncs after every
    /// append itself, so `Manual` (the default) makes each batch durable before the core
    /// hears `Persisted`; `NoSync` is for tests only.
    pub durability: Durability,
}

impl Default for ShellConfig {
    fn default() -> ShellConfig {
        let n = |v: usize| NonZeroUsize::new(v).unwrap_or(NonZeroUsize::MIN);
        ShellConfig {
            tick: Duration::from_millis(5),
            intake_queue: n(1024),
            intake_queue_bytes: n(64 << 20),
            stream_max_in_flight: n(1024),
            peer_queue: n(64),
            peer_send_queue: n(1024),
            submit_concurrency: n(64),
            submit_timeout: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(5),
            served_batches: n(256),
            durability: Durability::Manual,
        }
    }
}

impl ShellConfig {
    /// `min(initial · 2^attempt, max)`, never overflowing.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX);
        self.backoff_initial.saturating_mul(factor).min(self.backoff_max)
    }
}

/// What a node may be handed instead of creating it.
pub struct Deps {
    /// A bound listener to serve on (tests, or a supervisor handing over a socket);
    /// `None`: bind [`Config::listen`].
    pub listener: Option<TcpListener>,
    /// Where the node makes its metrics (a detached registry unless the binary serves
    /// one).
    pub registry: telemetry::Registry,
    /// A Byzantine behaviour, for multi-process fault tests only.
    #[cfg(feature = "testing")]
    pub byzantine: Option<testing::Byzantine>,
}

impl Default for Deps {
    fn default() -> Deps {
        Deps {
            listener: None,
            registry: telemetry::Registry::detached("batcher"),
            #[cfg(feature = "testing")]
            byzantine: None,
        }
    }
}

/// A copy of [`Stats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Requests pending in the mempool.
    pub pending: u64,
    /// Bytes of the requests pending in the mempool.
    pub pending_bytes: u64,
    /// Requests in unordered batches of the term.
    pub in_flight: u64,
    /// Bytes of the requests in unordered batches of the term.
    pub in_flight_bytes: u64,
    /// Unordered batches of the term.
    pub unordered_batches: u64,
    /// The core's term.
    pub term: u64,
    /// Term changes the core went through since the node started.
    pub term_changes: u64,
    /// Batches this node cut as primary.
    pub batches_cut: u64,
    /// Batches appended to the batch store and synced (cut or accepted).
    pub batches_persisted: u64,
    /// Batches this node accepted as secondary.
    pub batches_accepted: u64,
    /// Pulled batches that failed verification.
    pub batches_rejected: u64,
    /// Batches re-adopted from the store at start.
    pub batches_restored: u64,
    /// Router requests admitted.
    pub admitted: u64,
    /// Router requests refused.
    pub refused: u64,
    /// Intake messages read from the router.
    pub intake_messages: u64,
    /// BAFs handed to the consenter submitter.
    pub bafs_sent: u64,
    /// Complaints handed to the consenter submitter.
    pub complaints: u64,
    /// BAFs and complaints given up (their batch ordered or their term over).
    pub submits_dropped: u64,
    /// Decisions fed to the core.
    pub decisions: u64,
    /// Ordered batches of the shard fed to the core.
    pub ordered_batches: u64,
    /// Ordered batches fetched from other batchers.
    pub fetched_batches: u64,
    /// Requests of pulled batches whose content this node checked.
    pub pulled_checked: u64,
    /// Requests of pulled batches not checked again: this party's router had admitted
    /// the same bytes ([`CheckedRequests`]).
    pub pulled_known: u64,
    /// Compact batches pulled (docs/batcher.md "Compact pulls").
    pub pulled_compact: u64,
    /// Compact batches this node could not rebuild, fetched whole.
    pub compact_fallbacks: u64,
}

pub(crate) fn bump(c: &prometheus::IntCounter) {
    c.inc();
}

pub(crate) fn add(c: &prometheus::IntCounter, n: u64) {
    c.inc_by(n);
}

/// How long `stop` lets the server close its connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A running batcher node.
pub struct Handle {
    /// The address it serves on.
    pub addr: SocketAddr,
    /// Its counters.
    pub stats: Arc<Stats>,
    stop: watch::Sender<bool>,
    server: Option<wire::node::Serving>,
    tasks: Vec<JoinHandle<()>>,
    main: wire::node::Task<Result<()>>,
    /// The loop's result once `failed` took it.
    ended: Option<Result<()>>,
    persister: Option<std::thread::JoinHandle<()>>,
}

impl Handle {
    /// Whether the node's loop still runs (it stops on a storage failure).
    pub fn is_running(&self) -> bool {
        self.ended.is_none() && !self.main.is_finished()
    }
}

impl wire::node::Node for Handle {
    type Error = Error;

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until the node's loop stops on its own (a storage failure, a task it
    /// depends on ended) and returns why; a supervisor then calls `stop` and exits
    /// non-zero.
    async fn failed(&mut self) -> Result<()> {
        if let Some(result) = &self.ended {
            return result.clone();
        }
        let serving = async {
            match self.server.as_mut() {
                Some(s) => s.ended().await,
                None => std::future::pending().await,
            }
        };
        let main = async { join_result(self.main.join().await) };
        let result = tokio::select! {
            r = main => r,
            r = serving => r.map_err(|e| Error::Stopped { reason: e.to_string() }),
        };
        self.ended = Some(result.clone());
        result
    }

    /// Stops every task, waits until the store is closed (its lock released, so the
    /// data directory can be reopened), and returns the loop's error if it had stopped
    /// on one.
    async fn stop(mut self) -> Result<()> {
        let joined = self.main.finish(Duration::ZERO).await.map_or(Ok(()), join_result);
        let result = self.ended.take().unwrap_or(joined);
        // Open streams end and the server closes its connections (peers must not stay
        // attached to a stopped node); past the grace period it is aborted.
        self.stop.send_replace(true);
        if let Some(server) = self.server.take() {
            server.stop(SHUTDOWN_GRACE).await;
        }
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        if let Some(thread) = self.persister.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        result
    }
}

/// The loop's result from its join handle (cancelled: stopped by `shutdown`).
fn join_result(joined: std::result::Result<Result<()>, tokio::task::JoinError>) -> Result<()> {
    match joined {
        Ok(result) => result,
        Err(e) if e.is_cancelled() => Ok(()),
        Err(e) => Err(Error::Stopped {
            reason: e.to_string(),
        }),
    }
}

impl Drop for Handle {
    /// A handle dropped without `stop` still stops the node's tasks (it does
    /// not wait for them).
    fn drop(&mut self) {
        self.stop.send_replace(true);
        self.main.abort();
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn check(config: &Config) -> Result<()> {
    config.batcher.validate()?;
    let bad = |reason: String| Err(Error::NodeConfig { reason });
    for &party in config.batcher.parties.ids() {
        if party != config.batcher.party && !config.peers.contains_key(&party) {
            return bad(format!("no batcher endpoint for party {party}"));
        }
    }
    if config.consenters.is_empty() {
        return bad("no consenter endpoints".into());
    }
    if config.shell.tick.is_zero() {
        return bad("shell.tick must be positive".into());
    }
    Ok(())
}

/// Validates the config, opens the store (rebuilding the core's term and its persisted,
/// unordered batches), binds the listener and starts the node. Needs a tokio runtime.
pub async fn spawn(config: Config, deps: Deps) -> Result<Handle> {
    check(&config)?;
    let listener = match deps.listener {
        Some(l) => l,
        None => TcpListener::bind(config.listen)
            .await
            .map_err(|e| Error::Listen {
                addr: config.listen,
                reason: e.to_string(),
            })?,
    };
    let stats = Stats::register(&deps.registry).map_err(|e| Error::Metrics(e.to_string()))?;
    let faults = Faults {
        #[cfg(feature = "testing")]
        byzantine: deps.byzantine,
        #[cfg(feature = "testing")]
        late: match deps.byzantine {
            Some(testing::Byzantine::EquivocateLate { to }) => {
                Some(Arc::new(testing::Late::new(config.batcher.party, to)))
            }
            _ => None,
        },
    };
    start::start(config, listener, stats, faults).await
}
