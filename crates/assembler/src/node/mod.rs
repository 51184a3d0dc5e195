//! The assembler node (docs/assembler.md): one tokio task per concern, joined by bounded
//! channels.
//!
//! * the decision follower reads `Consenter.Decisions` from its own party's consenter
//!   (another one when that one fails or no longer holds the next decision), verifies
//!   every decision's certificate and hands it to the main loop;
//! * one prefetcher per shard pulls the current primary's batches from the party's own
//!   batcher of that shard (`BatcherPeer.Pull`);
//! * the main loop feeds decisions and batches to the [`Core`], fetches the next
//!   block's batch from any batcher of its shard when it is missing
//!   (`BatcherPeer.Fetch`, digest checked by the core), and appends complete blocks to
//!   the ledger (synced) before the Deliver streams see them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use arma::ClusterKeys;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tracing::info;
use types::{PartyId, ShardId};

mod follow;
mod main_loop;
mod prefetch;

pub use main_loop::FETCH_CALL_TIMEOUT;

use crate::core::{Core, CoreError, Limits, OfferedBatch};
use crate::deliver::{DeliverLimits, DeliverService};
use crate::fabric_deliver::{FabricDeliverLimits, FabricDeliverService};
use crate::metrics::{Metrics, gauge_value};
use crate::store::{BlockStore, StoreError};
use follow::Follower;
use main_loop::MainLoop;
use prefetch::{LaneView, Prefetcher};
use wire::server::ServerLimits;

/// Largest message read from a consenter or a batcher.
const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Errors of the node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The block store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The consenters' chain does not continue this ledger.
    #[error(transparent)]
    Chain(#[from] CoreError),
    /// A configuration value is unusable.
    #[error("assembler configuration: {0}")]
    Config(String),
    /// The listener could not be bound.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A task of the node ended.
    #[error("assembler task ended: {0}")]
    Stopped(String),
    /// A config in force removed this assembler's party: it stopped, as it should
    /// (docs/reconfiguration.md "Removing a party").
    #[error("party {0} left the network (a config update removed it): this assembler stopped")]
    PartyLeft(PartyId),
    /// Its metrics could not be made.
    #[error("assembler metrics: {0}")]
    Metrics(#[from] telemetry::Error),
}

/// Result alias of the node.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything an assembler node needs.
#[derive(Clone)]
pub struct Config {
    /// Its party.
    pub party: PartyId,
    /// Number of shards.
    pub shards: u32,
    /// `Consenter.Decisions` endpoints (`http://host:port`), its own party's first.
    pub consenters: Vec<String>,
    /// The genesis consenter set: every decision's certificate must verify against the
    /// set in force for it, this one until a config update replaces it.
    pub consenter_keys: ClusterKeys,
    /// The network's config rules: with them the assembler follows config updates
    /// (persisted beside the ledger, `<ledger>.consenter-sets`); without, a decision that
    /// puts a new config in force stops it (docs/reconfiguration.md).
    pub config_rules: Option<std::sync::Arc<dyn arma::ConfigRules>>,
    /// `BatcherPeer` endpoints by (party, shard).
    pub batchers: BTreeMap<(PartyId, ShardId), String>,
    /// The other parties' assembler endpoints: a batch is also fetched from them
    /// (`FetchBatch`), so once one correct assembler holds a block the others can get its
    /// batch even when the one correct batcher that held it is gone.
    pub assemblers: Vec<String>,
    /// The ledger directory.
    pub ledger: PathBuf,
    /// Where the Deliver service listens.
    pub listen: SocketAddr,
    /// Connection-level limits of the Deliver service.
    pub server: ServerLimits,
    /// Bounds of the core.
    pub limits: Limits,
    /// Bounds of the Deliver streams (the Fabric Deliver's too, counted apart).
    pub deliver: DeliverLimits,
    /// The network's Fabric genesis config block: block 0 of the Fabric chain served on
    /// `orderer.AtomicBroadcast/Deliver` (`None`: that service answers every request
    /// NOT_FOUND).
    pub fabric_genesis: Option<wire::fabric::common::Block>,
    /// Waits between retries (reconnect, fetch).
    pub retry: Duration,
}

/// What a node may be handed besides its config.
#[derive(Debug, Clone)]
pub struct Deps {
    /// Where the node makes its metrics (a detached registry unless the binary serves
    /// one).
    pub registry: telemetry::Registry,
}

impl Default for Deps {
    fn default() -> Deps {
        Deps {
            registry: telemetry::Registry::detached("assembler"),
        }
    }
}

/// A running node.
pub struct Handle {
    /// The bound Deliver address.
    pub addr: SocketAddr,
    /// Blocks in the ledger when the node started.
    pub height: u64,
    stop: watch::Sender<bool>,
    /// The main loop, until it was awaited.
    main: wire::node::Task<Result<()>>,
    tasks: Vec<JoinHandle<()>>,
    /// The Deliver service (taken by `stop`).
    serving: Option<wire::node::Serving>,
    /// The main loop's result once `failed` took it.
    ended: Option<std::result::Result<(), String>>,
}

impl Handle {
    fn abort(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl wire::node::Node for Handle {
    type Error = Error;

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Resolves when the main loop ends on its own (a ledger failure, or a verified chain
    /// that does not continue the ledger) or the Deliver service failed.
    async fn failed(&mut self) -> Result<()> {
        if self.ended.is_none() {
            let serving = async {
                match self.serving.as_mut() {
                    Some(s) => s.ended().await,
                    None => std::future::pending().await,
                }
            };
            let main = async {
                match self.main.join().await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            };
            let r = tokio::select! {
                r = main => r,
                r = serving => r.map_err(|e| e.to_string()),
            };
            self.ended = Some(r);
        }
        match &self.ended {
            Some(Err(reason)) => Err(Error::Stopped(reason.clone())),
            _ => Ok(()),
        }
    }

    async fn stop(mut self) -> Result<()> {
        let _ = self.stop.send(true);
        if let Some(serving) = self.serving.take() {
            // Deliver streams follow the ledger without end: they are cut, not awaited.
            serving.stop(Duration::ZERO).await;
        }
        // The loop ends at the stop signal (an append in progress completes first, so
        // the ledger is closed when it returns); past the grace it is aborted.
        let _ = self.main.finish(wire::node::DEFAULT_GRACE).await;
        self.abort();
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        match self.ended.take() {
            Some(Err(reason)) => Err(Error::Stopped(reason)),
            _ => Ok(()),
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.main.abort();
        self.abort();
    }
}

fn channel(uri: &str) -> Result<Channel> {
    clients::channel::lazy(uri, clients::channel::DEFAULT_CONNECT_TIMEOUT)
        .map_err(|e| Error::Config(e.to_string()))
}

/// The consenter sets this node learned before a restart (the genesis set alone on a
/// fresh ledger), and the file that keeps them.
fn load_sets(cfg: &Config) -> Result<(arma::ConsenterSets, std::path::PathBuf)> {
    let sets_path = cfg.ledger.with_extension("consenter-sets");
    let mut sets = arma::ConsenterSets::new(&cfg.consenter_keys, cfg.config_rules.clone());
    let sets_error = |e: &dyn std::fmt::Display| {
        Error::Stopped(format!("the consenter sets in {}: {e}", sets_path.display()))
    };
    if let Some(bytes) = clients::file::read_if_present(&sets_path).map_err(|e| sets_error(&e))? {
        sets.restore(&bytes).map_err(|e| sets_error(&e))?;
    }
    // Restarted after its party left: it stops again.
    if sets.newest_view().is_some_and(|v| v.has_left(cfg.party)) {
        return Err(Error::PartyLeft(cfg.party));
    }
    Ok((sets, sets_path))
}

/// Validates the config, opens the ledger, binds the Deliver service and starts the node.
pub async fn spawn(cfg: Config, deps: Deps) -> Result<Handle> {
    if cfg.consenters.is_empty() || cfg.shards == 0 {
        return Err(Error::Config("no consenters or no shards".into()));
    }
    let store = BlockStore::open(&cfg.ledger)?;
    let height = store.next_block();
    let last = store.last()?;
    let core = Core::new(
        cfg.limits,
        store.next_block(),
        last.as_ref().map(|(h, _)| h.hash()),
    );
    // Re-read the decision of the last block: the core skips the headers it holds.
    let from_decision = last.as_ref().map_or(1, |(h, _)| h.decision);
    let (stop, rx_stop) = watch::channel(false);
    let metrics = Metrics::register(&deps.registry)?;
    metrics.height.set(gauge_value(height));
    let serving = serve(&cfg, &store, &metrics).await?;
    let addr = serving.addr();
    let (tx_decisions, rx_decisions) = mpsc::channel(16);
    let (tx_batches, rx_batches) = mpsc::channel(64);
    let consenters = cfg
        .consenters
        .iter()
        .map(|c| channel(c))
        .collect::<Result<Vec<_>>>()?;
    let (sets, sets_path) = load_sets(&cfg)?;
    // The newest config in force this node saw (a party may have joined since genesis).
    let newest = sets.newest_view().cloned();
    let follower = Follower {
        consenters,
        sets,
        sets_path,
        next: from_decision,
        tx: tx_decisions,
        retry: cfg.retry,
    };
    let mut tasks = vec![tokio::spawn(follower.run())];
    let parties = newest.as_ref().map_or_else(
        || (arma::Parties::contiguous(cfg.consenter_keys.n()), 0),
        |v| (v.parties.clone(), v.sequence),
    );
    let lanes = prefetchers(&cfg, &parties.0, &tx_batches, &mut tasks)?;
    let batchers = shard_batchers(&cfg)?;
    let assemblers = cfg
        .assemblers
        .iter()
        .map(|a| channel(a))
        .collect::<Result<Vec<_>>>()?;
    let mut main = MainLoop {
        core,
        store: Some(store),
        lanes,
        parties,
        party: cfg.party,
        leaving: None,
        rules: cfg.config_rules.clone(),
        linked: cfg.batchers.keys().copied().collect(),
        batchers,
        assemblers,
        tx_batches,
        fetching: None,
        retry: cfg.retry,
        metrics,
    };
    if let Some(view) = &newest {
        main.follow_config(view);
    }
    info!(party = cfg.party, %addr, from_decision, "assembler started");
    let main = tokio::spawn(main.run(rx_decisions, rx_batches, rx_stop));
    Ok(Handle {
        addr,
        height,
        stop,
        main: wire::node::Task::new(main),
        tasks,
        serving: Some(serving),
        ended: None,
    })
}

/// Binds and serves the Deliver service and the Fabric Deliver service.
async fn serve(cfg: &Config, store: &BlockStore, metrics: &Metrics) -> Result<wire::node::Serving> {
    let listen_error = |e: wire::node::ListenError| Error::Listen {
        addr: e.addr,
        source: std::io::Error::other(e.reason),
    };
    let fabric = FabricDeliverService::new(
        store.reader(),
        cfg.fabric_genesis.clone(),
        FabricDeliverLimits {
            deliver: cfg.deliver,
            ..FabricDeliverLimits::default()
        },
        metrics.fabric_deliver_streams.clone(),
    )
    .map_err(|e| Error::Config(e.to_string()))?
    .into_server();
    let listener = wire::node::bind(cfg.listen).await.map_err(listen_error)?;
    let service =
        DeliverService::new(store.reader(), cfg.deliver, metrics.deliver_streams.clone()).into_server();
    wire::node::serve(listener, &cfg.server, |b| {
        b.add_service(service).add_service(fabric)
    })
    .map_err(listen_error)
}

/// Starts one prefetcher per shard (the party's own batcher); returns their lane views.
fn prefetchers(
    cfg: &Config,
    parties: &arma::Parties,
    tx_batches: &mpsc::Sender<OfferedBatch>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Result<Vec<watch::Sender<LaneView>>> {
    let mut lanes = Vec::new();
    for shard in 0..cfg.shards {
        let uri = cfg
            .batchers
            .get(&(cfg.party, shard))
            .ok_or_else(|| Error::Config(format!("no batcher of party {} shard {shard}", cfg.party)))?;
        let (tx_lane, rx_lane) = watch::channel(LaneView {
            primary: arma::primary_of(shard, 0, parties),
            term: 0,
            from_seq: 1,
        });
        lanes.push(tx_lane);
        let prefetch = Prefetcher {
            shard,
            batcher: channel(uri)?,
            view: rx_lane,
            tx: tx_batches.clone(),
            retry: cfg.retry,
        };
        tasks.push(tokio::spawn(prefetch.run()));
    }
    Ok(lanes)
}

/// Every shard's batchers, the own party's first (where missing batches are fetched).
fn shard_batchers(cfg: &Config) -> Result<BTreeMap<ShardId, Vec<Channel>>> {
    let mut batchers: BTreeMap<ShardId, Vec<Channel>> = BTreeMap::new();
    for ((party, shard), uri) in &cfg.batchers {
        let list = batchers.entry(*shard).or_default();
        let ch = channel(uri)?;
        if *party == cfg.party {
            list.insert(0, ch);
        } else {
            list.push(ch);
        }
    }
    Ok(batchers)
}
