//! Starting a node: open the store, rebuild the core, wire the channels, spawn the
//! server and every task, then the loop (`run`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tracing::info;
use types::PartyId;
use wire::pb;

use super::book::Book;
use super::decisions::Follower;
use super::links::{Opener, PeerEvent, PeerSenders, PullCtx, PullWant, SubmitView, run_pull, run_submitter};
use super::run::{Acks, Forwards, Node, Queues};
use super::served::Served;
use super::service::{IntakeItem, IntakeService, PeerService};
use super::store::{Done, Job, Progress, Store, StoreReader, spawn_persister};
use super::{Config, Handle, Stats, bump};
use crate::{Batcher, Config as CoreConfig, Error, Output, Result, TermInfo};

fn stopped(reason: impl std::fmt::Display) -> Error {
    Error::Stopped {
        reason: reason.to_string(),
    }
}

/// The largest stored batch record; the batch limits must fit the wire's `Batch` limit.
fn batch_record_bound(cfg: &CoreConfig) -> Result<u32> {
    let limit = wire::limits::BATCH;
    let requests = u64::from(cfg.max_batch_requests.get());
    let bound = requests
        .checked_mul(8)
        .and_then(|r| r.checked_add(cfg.max_batch_bytes.get()))
        .and_then(|r| r.checked_add(4096));
    match bound {
        Some(b) if b <= limit.max_bytes as u64 && requests <= limit.budget.max_items as u64 => {
            Ok(u32::try_from(b).unwrap_or(u32::MAX))
        }
        _ => Err(Error::NodeConfig {
            reason: format!(
                "max_batch_bytes {} and max_batch_requests {} do not fit a Batch message ({} bytes, {} requests)",
                cfg.max_batch_bytes, cfg.max_batch_requests, limit.max_bytes, limit.budget.max_items
            ),
        }),
    }
}

fn channel(uri: &str) -> Result<Channel> {
    clients::channel::lazy(uri, Duration::from_secs(5)).map_err(|e| Error::NodeConfig {
        reason: format!("bad {e}"),
    })
}

fn channels(uris: &BTreeMap<PartyId, String>, except: PartyId) -> Result<BTreeMap<PartyId, Channel>> {
    uris.iter()
        .filter(|(p, _)| **p != except)
        .map(|(p, uri)| Ok((*p, channel(uri)?)))
        .collect()
}

/// Opens the store, rebuilds the core and starts every task.
pub(super) async fn start(
    config: Config,
    listener: TcpListener,
    stats: Stats,
    faults: super::Faults,
) -> Result<Handle> {
    let addr = listener.local_addr().map_err(|e| Error::Listen {
        addr: config.listen,
        reason: e.to_string(),
    })?;
    let max_record = batch_record_bound(&config.batcher)?;
    let (dir, durability) = (config.data_dir.clone(), config.shell.durability);
    let memory = config.batcher.ordered_memory.get();
    let (store, recovered) =
        tokio::task::spawn_blocking(move || Store::open(&dir, durability, max_record, memory))
            .await
            .map_err(stopped)??;
    let mut progress = recovered.progress;
    let stats = Arc::new(stats);
    let mut parts = Parts::new(&config, store, listener, Arc::clone(&stats), faults)?;
    if config.joining && progress == Progress::GENESIS {
        progress = join(&config, &mut parts).await?;
    }
    let start = TermInfo {
        term: progress.term,
        last_ordered_seq: progress.last_ordered_seq,
    };
    let mut core = Batcher::new(config.batcher.clone(), config.key.clone(), start)?;
    for digest in recovered.ordered {
        core.remember_ordered(digest);
    }
    // The newest config a decision put in force (the node's config file holds the genesis
    // one), before the stored batches are restored: those of the term in progress were
    // verified and signed under it. (After a crash between persisting the sets and the
    // switch decision's progress record, the stored batches are of the term before the
    // switch, which is over: a rotated primary's fail to restore, which changes nothing.)
    if let Some(sets) = parts.sets.as_ref()
        && let Some(view) = sets.newest_view()
    {
        if view.has_left(config.batcher.party) {
            return Err(Error::PartyLeft {
                party: config.batcher.party,
            });
        }
        parts.book.follow(view);
        super::follow::apply(&mut core, view, &config.next_key_files, None);
    }
    // The restored term is where the node starts, not a change.
    stats.term.set(super::metrics::gauge(progress.term));
    let party = config.batcher.party;
    let own_highest = recovered
        .unordered
        .iter()
        .filter(|b| b.id().primary == party)
        .map(|b| b.id().seq)
        .max();
    let mut initial = Vec::new();
    for batch in recovered.unordered {
        let outputs = core.restore(batch);
        if !outputs.is_empty() {
            bump(&stats.batches_restored);
        }
        initial.extend(outputs);
    }
    // Safety net: a primary must never cut a seq it already signed in the term.
    if let (Some(highest), true) = (own_highest, core.is_primary())
        && core.next_seq().is_none_or(|next| next <= highest)
    {
        return Err(Error::Storage {
            what: "restore the batches of the term",
            reason: format!(
                "seq {highest} is stored but the core would cut {:?} next",
                core.next_seq()
            ),
        });
    }
    info!(
        party = config.batcher.party,
        shard = config.batcher.shard,
        term = progress.term,
        next_decision = progress.next_decision,
        stored = recovered.stored,
        restored = stats.batches_restored.get(),
        "batcher starting"
    );
    parts.launch(config, core, initial, progress, addr)
}

/// A joining node with no progress yet: waits for the decision that adds its party
/// (`super::join`) and persists the progress it starts from.
async fn join(config: &Config, parts: &mut Parts) -> Result<Progress> {
    let (follower, rx) = super::join::follower(parts, config);
    let waiting = super::join::Waiting {
        follower,
        party: config.batcher.party,
        rx,
    };
    let progress = super::join::wait(waiting)
        .await
        .ok_or_else(|| stopped("the decisions follower ended while the party was joining"))?;
    // The sets the waiting follower learned (persisted at each switch).
    parts.sets = super::decisions::load_sets(config)?;
    parts
        .tx_persist
        .send(Job::Progress(progress, Vec::new()))
        .await
        .map_err(|_| stopped("the persister ended"))?;
    Ok(progress)
}

/// The channels and shared state the tasks are built from.
pub(super) struct Parts {
    pub(super) stats: Arc<Stats>,
    pub(super) served: Arc<Served>,
    pub(super) reader: StoreReader,
    tx_persist: mpsc::Sender<Job>,
    rx_done: mpsc::Receiver<Done>,
    persister: std::thread::JoinHandle<()>,
    listener: TcpListener,
    pub(super) book: Arc<Book>,
    pub(super) own: Channel,
    pub(super) sets: Option<arma::ConsenterSets>,
    pub(super) sets_path: std::path::PathBuf,
    faults: super::Faults,
}

impl Parts {
    fn new(
        config: &Config,
        store: Store,
        listener: TcpListener,
        stats: Arc<Stats>,
        faults: super::Faults,
    ) -> Result<Parts> {
        let queue = (config.batcher.max_unordered_batches.get() as usize)
            .saturating_mul(2)
            .saturating_add(16);
        let (tx_persist, rx_persist) = mpsc::channel(queue);
        let (tx_done, rx_done) = mpsc::channel(queue);
        let reader = store.reader();
        let persister = spawn_persister(store, rx_persist, tx_done).map_err(|e| Error::Storage {
            what: "start the persister thread",
            reason: e.to_string(),
        })?;
        Ok(Parts {
            stats,
            served: Arc::new(Served::new(config.shell.served_batches)),
            reader,
            tx_persist,
            rx_done,
            persister,
            listener,
            book: Arc::new(Book::new(
                config.batcher.party,
                config.batcher.shard,
                channels(&config.peers, config.batcher.party)?,
                config
                    .consenters
                    .iter()
                    .map(|(p, u)| Ok((*p, channel(u)?)))
                    .collect::<Result<_>>()?,
                config.batcher.parties.clone(),
                // The start config's parties; the config in force (restored or followed)
                // has a sequence at least as high and replaces them.
                0,
            )),
            own: channel(&config.own_consenter)?,
            sets: super::decisions::load_sets(config)?,
            sets_path: super::decisions::sets_path(&config.data_dir),
            faults,
        })
    }

    fn services(
        &self,
        config: &Config,
        tx_intake: mpsc::Sender<IntakeItem>,
        tx_peer: mpsc::Sender<PeerEvent>,
        stop: watch::Receiver<bool>,
        rx_want: watch::Receiver<Option<PullWant>>,
    ) -> (IntakeService, PeerService, PullCtx) {
        let cfg = &config.batcher;
        let checked = Arc::new(super::CheckedRequests::new(super::CHECKED_PER_GENERATION));
        // The byte bound admits at least one message of the largest size.
        let floor = std::cmp::min(
            cfg.max_request_bytes
                .get()
                .max(wire::limits::BATCHER_INTAKE_MAX_MESSAGE_BYTES),
            Semaphore::MAX_PERMITS,
        );
        let queue_bytes = config
            .shell
            .intake_queue_bytes
            .get()
            .clamp(floor, Semaphore::MAX_PERMITS);
        let intake = IntakeService {
            tx: tx_intake,
            stream_max_in_flight: config.shell.stream_max_in_flight,
            queue_bytes: Arc::new(Semaphore::new(queue_bytes)),
            max_request_bytes: cfg.max_request_bytes.get(),
            stats: Arc::clone(&self.stats),
            stop: stop.clone(),
            checked: (config.content != super::RequestContent::Opaque).then(|| Arc::clone(&checked)),
        };
        let pull = PullCtx {
            shard: cfg.shard,
            book: Arc::clone(&self.book),
            rx_want,
            tx_peer: tx_peer.clone(),
            shell: config.shell,
            content: Arc::new(config.content.clone()),
            checked,
            stats: Arc::clone(&self.stats),
        };
        let peer = PeerService {
            shard: cfg.shard,
            book: Arc::clone(&self.book),
            max_request_bytes: cfg.max_request_bytes.get(),
            served: Arc::clone(&self.served),
            store: self.reader.clone(),
            tx_peer,
            stop,
            content: Arc::new(config.content.clone()),
            faults: self.faults.clone(),
        };
        (intake, peer, pull)
    }

    fn launch(
        self,
        config: Config,
        core: Batcher,
        initial: Vec<Output>,
        progress: Progress,
        addr: std::net::SocketAddr,
    ) -> Result<Handle> {
        let shell = config.shell;
        let cfg = &config.batcher;
        let (tx_intake, rx_intake) = mpsc::channel(shell.intake_queue.get());
        let (tx_peer, rx_peer) = mpsc::channel(shell.peer_queue.get());
        let (tx_decided, rx_decided) = mpsc::channel(4);
        let (tx_submit, rx_submit) = mpsc::channel(shell.submit_concurrency.get());
        let (tx_want, rx_want) = watch::channel(None);
        let (tx_view, rx_view) = watch::channel(SubmitView {
            term: progress.term,
            ordered: None,
        });
        let (tx_stop, rx_stop) = watch::channel(false);
        let (intake, peer, pull) =
            self.services(&config, tx_intake, tx_peer.clone(), rx_stop.clone(), rx_want);
        let server = serve(self.listener, &config.server, intake, peer)?;
        let mut tasks = vec![tokio::spawn(run_pull(pull))];
        let (acks, forwards) = peer_senders(&self.book, shell, &mut tasks);
        let stats = Arc::clone(&self.stats);
        let submitter = run_submitter(rx_submit, Arc::clone(&self.book), rx_view, shell, stats);
        tasks.push(tokio::spawn(submitter));
        let follower = Follower {
            shard: cfg.shard,
            consenter: self.own,
            book: Arc::clone(&self.book),
            sets: self.sets,
            sets_path: self.sets_path,
            served: Arc::clone(&self.served),
            store: self.reader,
            tx: tx_decided,
            shell,
            stats: Arc::clone(&self.stats),
            next: progress.next_decision,
            fetch_batches: true,
        };
        tasks.push(tokio::spawn(follower.run()));
        let node = Node {
            max_unordered: cfg.max_unordered_batches.get() as usize,
            party: cfg.party,
            core,
            stats: Arc::clone(&self.stats),
            served: self.served,
            tx_persist: self.tx_persist,
            rx_done: self.rx_done,
            deferred: VecDeque::new(),
            acks,
            book: self.book,
            forwards,
            tx_submit,
            tx_want,
            tx_view,
            progress,
            ordered_mark: None,
            started: Instant::now(),
            tick: shell.tick,
            persisted_at: std::collections::VecDeque::new(),
            faults: self.faults,
            need_full: None,
            next_key_files: config.next_key_files.clone(),
            leaving: None,
        };
        let main = tokio::spawn(node.run(
            initial,
            Queues {
                rx_intake,
                rx_peer,
                rx_decided,
            },
        ));
        Ok(Handle {
            addr,
            stats: self.stats,
            stop: tx_stop,
            server: Some(server),
            tasks,
            main: wire::node::Task::new(main),
            ended: None,
            persister: Some(self.persister),
        })
    }
}

/// Serves both services on `listener` until the handle's `stop` (which first turns the
/// stop signal the open streams watch).
fn serve(
    listener: TcpListener,
    limits: &wire::server::ServerLimits,
    intake: IntakeService,
    peer: PeerService,
) -> Result<wire::node::Serving> {
    wire::node::serve(listener, limits, |b| {
        b.add_service(intake.into_server())
            .add_service(peer.into_server())
    })
    .map_err(|e| Error::Listen {
        addr: e.addr,
        reason: e.reason,
    })
}

fn peer_senders(
    book: &Arc<Book>,
    shell: super::ShellConfig,
    tasks: &mut Vec<JoinHandle<()>>,
) -> (Acks, Forwards) {
    let ack: Opener<pb::BatchAttestationFragment> =
        Arc::new(|mut client, stream| Box::pin(async move { client.ack(stream).await.map(|_| ()) }));
    let forward: Opener<pb::ForwardRequest> =
        Arc::new(|mut client, stream| Box::pin(async move { client.forward(stream).await.map(|_| ()) }));
    let (acks, t) = PeerSenders::spawn(book, shell, &ack);
    tasks.extend(t);
    let (forwards, t) = PeerSenders::spawn(book, shell, &forward);
    tasks.extend(t);
    (acks, forwards)
}
