//! Starting the node, and its loop: the one task that owns the core, feeds it the time,
//! router requests, peer messages, persisted batches and decisions, and executes its
//! outputs in order.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tracing::{error, info, warn};
use types::PartyId;
use wire::pb;

use super::decisions::{Decided, Follower};
use super::links::{
    Opener, PeerEvent, PeerSenders, PullCtx, PullWant, SubmitJob, SubmitView, run_pull, run_submitter,
};
use super::served::Served;
use super::service::{IntakeItem, IntakeService, PeerService};
use super::store::{Done, Job, Progress, Store, StoreReader, spawn_persister};
use super::{Handle, NodeConfig, Stats, bump};
use crate::codec::{ConsenterRequest, encode_consenter_request};
use crate::{Batcher, Config, Error, Input, Output, RefuseReason, RequestDigest, Result, TermInfo};

fn stopped(reason: impl std::fmt::Display) -> Error {
    Error::Stopped {
        reason: reason.to_string(),
    }
}

/// The largest stored batch record; the batch limits must fit the wire's `Batch` limit.
fn batch_record_bound(cfg: &Config) -> Result<u32> {
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
    let endpoint = wire::server::client_endpoint(uri.to_string()).map_err(|e| Error::NodeConfig {
        reason: format!("bad endpoint {uri}: {e}"),
    })?;
    Ok(endpoint.connect_timeout(Duration::from_secs(5)).connect_lazy())
}

fn channels(uris: &BTreeMap<PartyId, String>, except: PartyId) -> Result<BTreeMap<PartyId, Channel>> {
    uris.iter()
        .filter(|(p, _)| **p != except)
        .map(|(p, uri)| Ok((*p, channel(uri)?)))
        .collect()
}

/// Opens the store, rebuilds the core and starts every task.
pub(super) async fn start(config: NodeConfig, listener: TcpListener) -> Result<Handle> {
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
    let progress = recovered.progress;
    let start = TermInfo {
        term: progress.term,
        last_ordered_seq: progress.last_ordered_seq,
    };
    let mut core = Batcher::new(config.batcher.clone(), config.key.clone(), start)?;
    for digest in recovered.ordered {
        core.remember_ordered(digest);
    }
    let stats = Arc::new(Stats::default());
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
        restored = stats.batches_restored.load(Ordering::Relaxed),
        "batcher starting"
    );
    let parts = Parts::new(&config, store, listener, Arc::clone(&stats))?;
    parts.launch(config, core, initial, progress, addr)
}

/// The channels and shared state the tasks are built from.
struct Parts {
    stats: Arc<Stats>,
    served: Arc<Served>,
    reader: StoreReader,
    tx_persist: mpsc::Sender<Job>,
    rx_done: mpsc::Receiver<Done>,
    persister: std::thread::JoinHandle<()>,
    listener: TcpListener,
    peers: BTreeMap<PartyId, Channel>,
    consenters: Vec<Channel>,
    own: Channel,
}

impl Parts {
    fn new(config: &NodeConfig, store: Store, listener: TcpListener, stats: Arc<Stats>) -> Result<Parts> {
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
            served: Arc::new(Served::new(config.shell.served_batches.get())),
            reader,
            tx_persist,
            rx_done,
            persister,
            listener,
            peers: channels(&config.peers, config.batcher.party)?,
            consenters: config
                .consenters
                .values()
                .map(|u| channel(u))
                .collect::<Result<_>>()?,
            own: channel(&config.own_consenter)?,
        })
    }

    fn services(
        &self,
        config: &NodeConfig,
        tx_intake: mpsc::Sender<IntakeItem>,
        tx_peer: mpsc::Sender<PeerEvent>,
        stop: watch::Receiver<bool>,
    ) -> (IntakeService, PeerService) {
        let cfg = &config.batcher;
        // The byte bound admits at least one request of the largest size.
        let queue_bytes = config
            .shell
            .intake_queue_bytes
            .get()
            .max(cfg.max_request_bytes.get())
            .min(Semaphore::MAX_PERMITS);
        let intake = IntakeService {
            tx: tx_intake,
            stream_max_in_flight: config.shell.stream_max_in_flight.get(),
            queue_bytes: Arc::new(Semaphore::new(queue_bytes)),
            max_request_bytes: cfg.max_request_bytes.get(),
            stats: Arc::clone(&self.stats),
            stop: stop.clone(),
        };
        let peer = PeerService {
            shard: cfg.shard,
            parties: cfg.parties,
            max_request_bytes: cfg.max_request_bytes.get(),
            served: Arc::clone(&self.served),
            store: self.reader.clone(),
            tx_peer,
            stop,
        };
        (intake, peer)
    }

    fn launch(
        self,
        config: NodeConfig,
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
        let (intake, peer) = self.services(&config, tx_intake, tx_peer.clone(), rx_stop.clone());
        let server = serve(self.listener, &config.server, intake, peer, rx_stop);
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(run_pull(PullCtx {
            shard: cfg.shard,
            peers: self.peers.clone(),
            rx_want,
            tx_peer,
            shell,
        })));
        let (acks, forwards) = peer_senders(&self.peers, shell, &mut tasks);
        tasks.push(tokio::spawn(run_submitter(
            rx_submit,
            self.consenters,
            rx_view,
            shell,
            Arc::clone(&self.stats),
        )));
        let follower = Follower {
            shard: cfg.shard,
            consenter: self.own,
            peers: self.peers,
            served: Arc::clone(&self.served),
            store: self.reader,
            tx: tx_decided,
            shell,
            stats: Arc::clone(&self.stats),
            next: progress.next_decision,
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
            forwards,
            tx_submit,
            tx_want,
            tx_view,
            progress,
            ordered_mark: None,
            started: Instant::now(),
            tick: shell.tick,
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
            main,
            persister: Some(self.persister),
        })
    }
}

/// Serves both services on `listener` until `stop` turns true and every stream ended.
fn serve(
    listener: TcpListener,
    limits: &wire::server::ServerLimits,
    intake: IntakeService,
    peer: PeerService,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let (incoming, _conn_stats) = wire::server::incoming(listener, limits);
    let server = wire::server::builder(limits)
        .add_service(intake.into_server())
        .add_service(peer.into_server());
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = server.serve_with_incoming_shutdown(incoming, shutdown).await {
            warn!(error = %e, "batcher server ended");
        }
    })
}

type Acks = PeerSenders<pb::BatchAttestationFragment>;
type Forwards = PeerSenders<pb::ForwardRequest>;

fn peer_senders(
    peers: &BTreeMap<PartyId, Channel>,
    shell: super::ShellConfig,
    tasks: &mut Vec<JoinHandle<()>>,
) -> (Acks, Forwards) {
    let ack: Opener<pb::BatchAttestationFragment> =
        Arc::new(|mut client, stream| Box::pin(async move { client.ack(stream).await.map(|_| ()) }));
    let forward: Opener<pb::ForwardRequest> =
        Arc::new(|mut client, stream| Box::pin(async move { client.forward(stream).await.map(|_| ()) }));
    let (acks, t) = PeerSenders::spawn(peers, shell, &ack);
    tasks.extend(t);
    let (forwards, t) = PeerSenders::spawn(peers, shell, &forward);
    tasks.extend(t);
    (acks, forwards)
}

/// The loop's inputs.
struct Queues {
    rx_intake: mpsc::Receiver<IntakeItem>,
    rx_peer: mpsc::Receiver<PeerEvent>,
    rx_decided: mpsc::Receiver<Decided>,
}

/// The loop's state: the core and the ends of every queue it feeds.
struct Node {
    core: Batcher,
    party: PartyId,
    max_unordered: usize,
    stats: Arc<Stats>,
    served: Arc<Served>,
    tx_persist: mpsc::Sender<Job>,
    rx_done: mpsc::Receiver<Done>,
    /// Reports of the persister read while the loop waited for room in its queue (so
    /// neither waits for the other), fed before the next input.
    deferred: VecDeque<Done>,
    acks: Acks,
    forwards: Forwards,
    tx_submit: mpsc::Sender<SubmitJob>,
    tx_want: watch::Sender<Option<PullWant>>,
    tx_view: watch::Sender<SubmitView>,
    /// Where the shard's ordering stands (written to the progress log per decision).
    progress: Progress,
    /// The last ordered batch of the current term, (primary, seq).
    ordered_mark: Option<(PartyId, u64)>,
    started: Instant,
    tick: Duration,
}

impl Node {
    async fn run(mut self, initial: Vec<Output>, mut q: Queues) -> Result<()> {
        self.execute(initial).await?;
        self.publish();
        let mut tick = tokio::time::interval(self.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            while let Some(done) = self.deferred.pop_front() {
                self.on_done(Some(done)).await?;
            }
            tokio::select! {
                biased;
                done = self.rx_done.recv() => self.on_done(done).await?,
                _ = tick.tick() => {
                    let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    self.feed(Input::Tick(now)).await?;
                }
                decided = q.rx_decided.recv() => match decided {
                    Some(d) => self.on_decided(d).await?,
                    None => return Err(stopped("the decision follower ended")),
                },
                event = q.rx_peer.recv() => match event {
                    Some(e) => self.on_peer(e).await?,
                    None => return Err(stopped("the peer queue closed")),
                },
                item = q.rx_intake.recv() => match item {
                    Some(i) => self.on_intake(i).await?,
                    None => return Err(stopped("the intake queue closed")),
                },
            }
        }
    }

    async fn on_done(&mut self, done: Option<Done>) -> Result<()> {
        match done {
            Some(Done::Persisted { id, digest }) => self.feed(Input::Persisted { id, digest }).await,
            Some(Done::Failed(e)) => {
                error!(error = %e, "persisting failed: the batcher stops");
                Err(e)
            }
            None => Err(stopped("the persister thread ended")),
        }
    }

    /// Queues a job for the persister; while its queue is full, keeps reading its
    /// reports so that the two never wait for each other.
    async fn persist(&mut self, job: Job) -> Result<()> {
        let (tx, rx) = (&self.tx_persist, &mut self.rx_done);
        loop {
            tokio::select! {
                permit = tx.reserve() => {
                    permit.map_err(|_| stopped("the persister thread ended"))?.send(job);
                    return Ok(());
                }
                done = rx.recv() => match done {
                    Some(d) => self.deferred.push_back(d),
                    None => return Err(stopped("the persister thread ended")),
                },
            }
        }
    }

    async fn feed(&mut self, input: Input) -> Result<()> {
        let outputs = self.core.handle(input);
        self.execute(outputs).await?;
        self.publish();
        Ok(())
    }

    async fn on_peer(&mut self, event: PeerEvent) -> Result<()> {
        let input = match event {
            PeerEvent::Forwarded { from, request } => Input::Forwarded { from, request },
            PeerEvent::Ack(baf) => Input::Baf(baf),
            PeerEvent::Pulled { from, batch } => Input::Batch { from, batch },
        };
        self.feed(input).await
    }

    async fn on_intake(&mut self, item: IntakeItem) -> Result<()> {
        let digest = RequestDigest::of(&item.request);
        let outputs = self.core.handle(Input::Request(item.request));
        drop(item.bytes);
        let answer = outputs.iter().find_map(|o| match o {
            Output::Admitted { digest: d } if *d == digest => Some(None),
            Output::Refused { digest: d, reason } if *d == digest => Some(Some(*reason)),
            _ => None,
        });
        let response = match answer {
            Some(None) => {
                bump(&self.stats.admitted);
                pb::IntakeResponse {
                    id: item.id,
                    admitted: true,
                    refusal: pb::IntakeRefusal::Unspecified as i32,
                }
            }
            Some(Some(reason)) => {
                bump(&self.stats.refused);
                pb::IntakeResponse {
                    id: item.id,
                    admitted: false,
                    refusal: refusal(reason) as i32,
                }
            }
            None => return Err(stopped("the core did not answer a request")),
        };
        item.reply.send(Ok(response));
        self.execute(outputs).await?;
        self.publish();
        Ok(())
    }

    async fn on_decided(&mut self, decided: Decided) -> Result<()> {
        let digests: Vec<RequestDigest> = decided
            .ordered
            .iter()
            .flat_map(|o| o.requests.iter().map(|r| RequestDigest::of(r)))
            .collect();
        for ordered in decided.ordered {
            bump(&self.stats.ordered_batches);
            self.served.remove(ordered.id, &ordered.digest);
            if ordered.term == self.progress.term {
                self.progress.last_ordered_seq = self.progress.last_ordered_seq.max(ordered.id.seq);
                self.ordered_mark = Some((ordered.id.primary, self.progress.last_ordered_seq));
            }
            let input = Input::Ordered {
                id: ordered.id,
                requests: ordered.requests,
            };
            self.feed(input).await?;
        }
        for info in decided.terms {
            if info.term > self.progress.term {
                self.progress.term = info.term;
                self.progress.last_ordered_seq = info.last_ordered_seq;
                self.ordered_mark = None;
                self.served.forget_before(info.term);
                // The new term is recorded before the core acts in it. The persister
                // appends in order, so no batch of the new term is fsynced (and so
                // served or attested) before this record: a restart restores them. The
                // record names this decision as the next one, so a restart reads it again.
                let record = Progress {
                    next_decision: decided.number,
                    ..self.progress
                };
                self.persist(Job::Progress(record, Vec::new())).await?;
            }
            self.feed(Input::TermChanged(info)).await?;
        }
        self.progress.next_decision = decided.number.saturating_add(1);
        bump(&self.stats.decisions);
        self.persist(Job::Progress(self.progress, digests)).await?;
        self.publish();
        Ok(())
    }

    async fn submit(
        &mut self,
        request: ConsenterRequest,
        term: u64,
        batch: Option<(PartyId, u64)>,
    ) -> Result<()> {
        let job = SubmitJob {
            bytes: Arc::new(encode_consenter_request(&request)),
            term,
            batch,
        };
        self.tx_submit
            .send(job)
            .await
            .map_err(|_| stopped("the consenter submitter ended"))
    }

    /// Executes the core's outputs in order (answers to the router are sent by
    /// `on_intake`; pulls follow the core's state, see `publish`).
    async fn execute(&mut self, outputs: Vec<Output>) -> Result<()> {
        for output in outputs {
            match output {
                Output::Persist(batch) => {
                    let counter = if batch.id().primary == self.party {
                        &self.stats.batches_cut
                    } else {
                        &self.stats.batches_accepted
                    };
                    bump(counter);
                    self.persist(Job::Batch(batch)).await?;
                }
                Output::Serve(batch) => self.served.insert(batch),
                Output::SendBaf(baf) => {
                    bump(&self.stats.bafs_sent);
                    let (term, id) = (baf.header.term, baf.header.id);
                    self.submit(baf.into(), term, Some((id.primary, id.seq))).await?;
                }
                Output::AckPrimary { to, baf } => {
                    self.acks.send(to, (&baf).into());
                }
                Output::ForwardToPrimary { to, request } => {
                    let message = pb::ForwardRequest {
                        request: request.to_vec(),
                        from: self.party,
                    };
                    self.forwards.send(to, message);
                }
                Output::Complain(complaint) => {
                    bump(&self.stats.complaints);
                    let term = complaint.term;
                    self.submit(complaint.into(), term, None).await?;
                }
                Output::BatchRejected { from, error } => {
                    bump(&self.stats.batches_rejected);
                    warn!(from, error = %error, "a pulled batch failed verification");
                }
                Output::Pull(_) | Output::Admitted { .. } | Output::Refused { .. } => {}
            }
        }
        Ok(())
    }

    /// Publishes what the pull task and the submitter follow, and the gauges.
    fn publish(&mut self) {
        let core = &self.core;
        let want = match core.next_seq() {
            Some(seq) if !core.is_primary() && core.unordered_batches() < self.max_unordered => {
                Some(PullWant {
                    primary: core.primary(),
                    term: core.term(),
                    seq,
                })
            }
            _ => None,
        };
        self.tx_want
            .send_if_modified(|w| std::mem::replace(w, want) != want);
        let view = SubmitView {
            term: core.term(),
            ordered: self.ordered_mark,
        };
        self.tx_view
            .send_if_modified(|v| std::mem::replace(v, view) != view);
        let s = &self.stats;
        s.pending.store(core.pending().0 as u64, Ordering::Relaxed);
        s.in_flight.store(core.in_flight().0 as u64, Ordering::Relaxed);
        s.unordered_batches
            .store(core.unordered_batches() as u64, Ordering::Relaxed);
        s.term.store(core.term(), Ordering::Relaxed);
    }
}

fn refusal(reason: RefuseReason) -> pb::IntakeRefusal {
    match reason {
        RefuseReason::Duplicate => pb::IntakeRefusal::Duplicate,
        RefuseReason::MempoolFullRequests => pb::IntakeRefusal::MempoolFullRequests,
        RefuseReason::MempoolFullBytes => pb::IntakeRefusal::MempoolFullBytes,
        RefuseReason::TooLarge => pb::IntakeRefusal::TooLarge,
        RefuseReason::WrongShard => pb::IntakeRefusal::WrongShard,
    }
}
