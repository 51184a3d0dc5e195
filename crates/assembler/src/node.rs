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
use std::sync::Arc;
use std::time::Duration;

use arma::{ClusterKeys, DecisionProof, VerifiedDecision};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tracing::{debug, info, warn};
use types::{PartyId, ShardId};
use wire::pb;
use wire::pb::batcher_peer_client::BatcherPeerClient;
use wire::pb::consenter_client::ConsenterClient;

use crate::core::{Block, Core, CoreError, Limits, OfferedBatch, Wanted};
use crate::deliver::{DeliverLimits, DeliverService};
use crate::metrics::{Metrics, gauge_value};
use crate::store::{BlockStore, StoreError};

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
}

/// Result alias of the node.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything an assembler node needs.
#[derive(Clone)]
pub struct NodeConfig {
    /// Its party.
    pub party: PartyId,
    /// Number of shards.
    pub shards: u32,
    /// `Consenter.Decisions` endpoints (`http://host:port`), its own party's first.
    pub consenters: Vec<String>,
    /// The consenter set: every decision's certificate must verify against it.
    pub consenter_keys: ClusterKeys,
    /// `BatcherPeer` endpoints by (party, shard).
    pub batchers: BTreeMap<(PartyId, ShardId), String>,
    /// The ledger directory.
    pub ledger: PathBuf,
    /// Where the Deliver service listens.
    pub listen: SocketAddr,
    /// Bounds of the core.
    pub limits: Limits,
    /// Bounds of the Deliver streams.
    pub deliver: DeliverLimits,
    /// Waits between retries (reconnect, fetch).
    pub retry: Duration,
}

/// What a node may be handed besides its config.
#[derive(Debug, Clone, Default)]
pub struct Deps {
    /// Where the node records its metrics (`None`: nowhere).
    pub metrics: Option<Metrics>,
}

/// A running node.
pub struct Running {
    /// The bound Deliver address.
    pub addr: SocketAddr,
    /// Blocks in the ledger when the node started.
    pub height: u64,
    stop: watch::Sender<bool>,
    main: JoinHandle<Result<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Waits until the main loop ends (an error, or [`Running::stop`]).
    pub async fn wait(mut self) -> Result<()> {
        let main = (&mut self.main).await;
        self.abort();
        main.map_err(|e| Error::Stopped(e.to_string()))?
    }

    /// Stops every task.
    pub fn stop(self) {
        let _ = self.stop.send(true);
        self.main.abort();
        self.abort();
    }

    fn abort(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn channel(uri: &str) -> Result<Channel> {
    clients::channel::lazy(uri, clients::channel::DEFAULT_CONNECT_TIMEOUT)
        .map_err(|e| Error::Config(e.to_string()))
}

/// Opens the ledger, binds the Deliver service and starts the node.
pub async fn spawn(cfg: NodeConfig) -> Result<Running> {
    spawn_with(cfg, Deps::default()).await
}

/// [`spawn`] with `deps` (its metrics).
pub async fn spawn_with(cfg: NodeConfig, deps: Deps) -> Result<Running> {
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
    if let Some(m) = &deps.metrics {
        m.height.set(gauge_value(height));
    }
    let open_streams = deps.metrics.as_ref().map(|m| m.deliver_streams.clone());
    let (server, addr) = serve(&cfg, &store, open_streams, rx_stop.clone()).await?;
    let (tx_decisions, rx_decisions) = mpsc::channel(16);
    let (tx_batches, rx_batches) = mpsc::channel(64);
    let consenters = cfg
        .consenters
        .iter()
        .map(|c| channel(c))
        .collect::<Result<Vec<_>>>()?;
    let follower = Follower {
        consenters,
        keys: cfg.consenter_keys.clone(),
        next: from_decision,
        tx: tx_decisions,
        retry: cfg.retry,
    };
    let mut tasks = vec![server, tokio::spawn(follower.run())];
    let lanes = prefetchers(&cfg, &tx_batches, &mut tasks)?;
    let batchers = shard_batchers(&cfg)?;
    let main = MainLoop {
        core,
        store: Some(store),
        lanes,
        n: cfg.consenter_keys.n(),
        batchers,
        tx_batches,
        fetching: None,
        retry: cfg.retry,
        metrics: deps.metrics,
    };
    info!(party = cfg.party, %addr, from_decision, "assembler started");
    let main = tokio::spawn(main.run(rx_decisions, rx_batches, rx_stop));
    Ok(Running {
        addr,
        height,
        stop,
        main,
        tasks,
    })
}

/// Binds the Deliver service; it stops when `rx_stop` turns true.
async fn serve(
    cfg: &NodeConfig,
    store: &BlockStore,
    open_streams: Option<prometheus::IntGauge>,
    mut rx_stop: watch::Receiver<bool>,
) -> Result<(JoinHandle<()>, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| Error::Listen {
            addr: cfg.listen,
            source,
        })?;
    let addr = listener.local_addr().unwrap_or(cfg.listen);
    let server_limits = wire::server::ServerLimits::default();
    let (incoming, _stats) = wire::server::incoming(listener, &server_limits);
    let service = DeliverService::new(store.reader(), cfg.deliver)
        .with_open_streams_gauge(open_streams)
        .into_server();
    let server = tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx_stop.wait_for(|s| *s).await;
        };
        let served = wire::server::builder(&server_limits)
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await;
        if let Err(e) = served {
            warn!(error = %e, "Deliver service stopped");
        }
    });
    Ok((server, addr))
}

/// Starts one prefetcher per shard (the party's own batcher); returns their lane views.
fn prefetchers(
    cfg: &NodeConfig,
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
            primary: arma::primary_of(shard, 0, cfg.consenter_keys.n()),
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
fn shard_batchers(cfg: &NodeConfig) -> Result<BTreeMap<ShardId, Vec<Channel>>> {
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

/// What a prefetcher pulls: the shard's current primary and term, from a seq on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LaneView {
    primary: PartyId,
    term: u64,
    from_seq: u64,
}

/// A verified decision with its proof.
type Decided = (VerifiedDecision, Arc<DecisionProof>);

struct Follower {
    consenters: Vec<Channel>,
    keys: ClusterKeys,
    next: u64,
    tx: mpsc::Sender<Decided>,
    retry: Duration,
}

impl Follower {
    async fn run(mut self) {
        let mut source = 0usize;
        loop {
            let before = self.next;
            let at = source % self.consenters.len();
            let channel = self.consenters[at].clone();
            let (reason, ahead) = self.follow(at, channel).await;
            if self.tx.is_closed() {
                return;
            }
            debug!(next = self.next, source = at, reason, "decision stream ended");
            if let Some(i) = ahead {
                // Another consenter holds what this one did not give: follow it.
                source = i;
                continue;
            }
            if self.next == before {
                // No progress from this consenter: try the next one after a pause.
                source = at.wrapping_add(1);
                tokio::time::sleep(self.retry).await;
            }
        }
    }

    /// Reads consenter `at`'s decisions until its stream fails, or until another
    /// consenter is found ahead (`clients::decisions`): a source that is silent, trickles
    /// or replays old decisions is left for it. Returns why, and the one ahead.
    async fn follow(&mut self, at: usize, channel: Channel) -> (String, Option<usize>) {
        use tokio_stream::StreamExt as _;
        let mut client = ConsenterClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
        let mut stream = match client.decisions(pb::DecisionsRequest { from: self.next }).await {
            Ok(s) => s.into_inner(),
            Err(s) => return (format!("open: {:?}: {}", s.code(), s.message()), None),
        };
        let chain = self.keys.chain_id();
        let verifier = arma::CertificateVerifier::new(self.keys.clone());
        let n = self.keys.n();
        let others: Vec<(usize, Channel)> = self
            .consenters
            .iter()
            .cloned()
            .enumerate()
            .filter(|(i, _)| *i != at)
            .collect();
        let mut check = tokio::time::interval(clients::decisions::CHECK_EVERY);
        check.tick().await;
        let mut at_last_check = self.next;
        loop {
            let message = tokio::select! {
                m = stream.next() => m,
                _ = check.tick(), if !others.is_empty() => {
                    let from = clients::decisions::probe_from(self.next, at_last_check);
                    at_last_check = self.next;
                    let verify = |d: &pb::Decision| arma::verify_pb_decision(d, &chain, &verifier, n).is_ok();
                    if let Some(i) = clients::decisions::ahead(&others, from, MAX_MESSAGE_BYTES, verify).await {
                        return (format!("consenter {i} holds decision {from}, which this one has not given"), Some(i));
                    }
                    continue;
                }
            };
            let d = match message {
                Some(Ok(d)) => d,
                None => return ("ended".into(), None),
                Some(Err(s)) => return (format!("{:?}: {}", s.code(), s.message()), None),
            };
            if d.number < self.next {
                continue;
            }
            if d.number > self.next {
                return (
                    format!("decision {} arrived while {} was expected", d.number, self.next),
                    None,
                );
            }
            let verified = match arma::verify_pb_decision(&d, &chain, &verifier, n) {
                Ok(v) => v,
                Err(e) => return (format!("decision {} does not verify: {e}", d.number), None),
            };
            let proof = match DecisionProof::try_from(&d) {
                Ok(p) => Arc::new(p),
                Err(e) => return (format!("decision {}: {e}", d.number), None),
            };
            if self.tx.send((verified, proof)).await.is_err() {
                return ("node stopped".into(), None);
            }
            self.next = self.next.saturating_add(1);
        }
    }
}

struct Prefetcher {
    shard: ShardId,
    batcher: Channel,
    view: watch::Receiver<LaneView>,
    tx: mpsc::Sender<OfferedBatch>,
    retry: Duration,
}

impl Prefetcher {
    async fn run(mut self) {
        loop {
            let view = *self.view.borrow_and_update();
            let pull = pull(self.shard, self.batcher.clone(), view, self.tx.clone());
            tokio::select! {
                reason = pull => {
                    if self.tx.is_closed() {
                        return;
                    }
                    debug!(shard = self.shard, reason, "prefetch stream ended");
                    tokio::time::sleep(self.retry).await;
                }
                changed = self.view.changed() => if changed.is_err() {
                    return;
                },
            }
        }
    }
}

/// Pulls the lane `view` of `shard` from `batcher` until the stream ends; returns why.
async fn pull(shard: ShardId, batcher: Channel, view: LaneView, tx: mpsc::Sender<OfferedBatch>) -> String {
    let mut client = BatcherPeerClient::new(batcher).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let request = pb::PullRequest {
        shard,
        primary: view.primary,
        term: view.term,
        from_seq: view.from_seq,
    };
    let mut stream = match client.pull(request).await {
        Ok(s) => s.into_inner(),
        Err(s) => return format!("open: {:?}: {}", s.code(), s.message()),
    };
    loop {
        match stream.message().await {
            Ok(Some(b)) => {
                if b.shard != shard || b.primary != view.primary {
                    return "a batch of another lane".into();
                }
                if tx.send(offered(b)).await.is_err() {
                    return "node stopped".into();
                }
            }
            Ok(None) => return "ended".into(),
            Err(s) => return format!("{:?}: {}", s.code(), s.message()),
        }
    }
}

/// A served batch as offered to the core (the core checks the digest).
fn offered(b: pb::Batch) -> OfferedBatch {
    let mut digest = [0u8; 32];
    if b.digest.len() == 32 {
        digest.copy_from_slice(&b.digest);
    }
    OfferedBatch {
        shard: b.shard,
        primary: b.primary,
        seq: b.seq,
        digest,
        requests: b.requests.into_iter().map(Arc::from).collect(),
    }
}

struct MainLoop {
    core: Core,
    /// The store (`None` while a blocking append holds it).
    store: Option<BlockStore>,
    lanes: Vec<watch::Sender<LaneView>>,
    n: u32,
    batchers: BTreeMap<ShardId, Vec<Channel>>,
    tx_batches: mpsc::Sender<OfferedBatch>,
    /// The block whose batch is being fetched.
    fetching: Option<(u64, JoinHandle<()>)>,
    retry: Duration,
    metrics: Option<Metrics>,
}

impl MainLoop {
    async fn run(
        mut self,
        mut rx_decisions: mpsc::Receiver<Decided>,
        mut rx_batches: mpsc::Receiver<OfferedBatch>,
        mut rx_stop: watch::Receiver<bool>,
    ) -> Result<()> {
        let mut tick = tokio::time::interval(self.retry);
        loop {
            let room = self.core.has_room();
            tokio::select! {
                d = rx_decisions.recv(), if room => {
                    let Some((decision, proof)) = d else {
                        return Err(Error::Stopped("decision follower".into()));
                    };
                    self.on_decision(&decision, proof)?;
                }
                b = rx_batches.recv() => {
                    let Some(batch) = b else {
                        return Err(Error::Stopped("batch channel".into()));
                    };
                    if let Err(e) = self.core.offer(batch) {
                        debug!(error = %e, "batch refused");
                    }
                }
                _ = tick.tick() => {}
                _ = rx_stop.wait_for(|s| *s) => return Ok(()),
            }
            self.append_ready().await?;
            self.fetch_missing();
            self.publish();
        }
    }

    /// Sets the gauges from the core.
    fn publish(&self) {
        if let Some(m) = &self.metrics {
            m.queued_headers.set(gauge_value(self.core.queued()));
            m.prefetch_bytes.set(gauge_value(self.core.index_bytes()));
        }
    }

    fn on_decision(&mut self, d: &VerifiedDecision, proof: Arc<DecisionProof>) -> Result<()> {
        self.core.on_decision(proof, &d.headers, &d.terms)?;
        if let Some(m) = &self.metrics {
            m.decisions.inc();
        }
        for h in &d.headers {
            if let Some(lane) = self.lanes.get(h.shard as usize) {
                lane.send_if_modified(|v| {
                    let next = LaneView {
                        primary: h.primary,
                        term: h.term,
                        from_seq: h.seq.saturating_add(1),
                    };
                    // Only a term change restarts the pull; a later seq of the same lane
                    // is what the running pull delivers anyway.
                    let changed = (v.primary, v.term) != (next.primary, next.term);
                    if changed {
                        *v = next;
                    }
                    changed
                });
            }
        }
        for t in &d.terms {
            if let Some(lane) = self.lanes.get(t.shard as usize) {
                lane.send_replace(LaneView {
                    primary: arma::primary_of(t.shard, t.term, self.n),
                    term: t.term,
                    from_seq: t.last_ordered_seq.saturating_add(1),
                });
            }
        }
        Ok(())
    }

    async fn append_ready(&mut self) -> Result<()> {
        let blocks = self.core.take_blocks();
        if blocks.is_empty() {
            return Ok(());
        }
        let mut store = self
            .store
            .take()
            .ok_or_else(|| Error::Stopped("block store".into()))?;
        let txs: usize = blocks.iter().map(|b| b.requests.len()).sum();
        let count = blocks.len();
        let began = std::time::Instant::now();
        let (store, appended) = tokio::task::spawn_blocking(move || {
            let r = blocks.iter().try_for_each(|b: &Block| store.append(b));
            (store, r)
        })
        .await
        .map_err(|e| Error::Stopped(format!("ledger thread: {e}")))?;
        let height = store.next_block();
        self.store = Some(store);
        appended?;
        if let Some(m) = &self.metrics {
            m.blocks.inc_by(count as u64);
            m.txs.inc_by(txs as u64);
            m.append_seconds.observe(began.elapsed().as_secs_f64());
            m.height.set(gauge_value(height));
        }
        Ok(())
    }

    /// Fetches the next block's batch from the batchers of its shard (own party's
    /// first), one block at a time, retrying until the core holds it.
    fn fetch_missing(&mut self) {
        let Some(w) = self.core.wanted() else {
            return;
        };
        if self
            .fetching
            .as_ref()
            .is_some_and(|(block, task)| *block == w.block && !task.is_finished())
        {
            return;
        }
        let batchers = self.batchers.get(&w.shard).cloned().unwrap_or_default();
        let tx = self.tx_batches.clone();
        let retry = self.retry;
        let task = tokio::spawn(fetch(w, batchers, tx, retry));
        if let Some((_, old)) = self.fetching.replace((w.block, task)) {
            old.abort();
        }
    }
}

/// How long one batcher may take to answer a fetch in the first round: a batcher that
/// does not answer (a Byzantine primary that hangs) costs at most this per round, never
/// the node. Each later round doubles it, up to 16 times (48 s): a large batch on a slow
/// link, fetched from every batcher at once, still arrives.
pub const FETCH_CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The call timeout of fetch round `round` (see [`FETCH_CALL_TIMEOUT`]).
fn fetch_timeout(round: u32) -> Duration {
    FETCH_CALL_TIMEOUT.saturating_mul(1 << round.min(4))
}

/// Whether `b` is the wanted batch: its id and digest are the ordered ones, and its
/// requests hash to that digest (a batcher's header fields alone are not trusted).
fn is_wanted(w: &Wanted, b: &OfferedBatch) -> bool {
    (b.shard, b.primary, b.seq, b.digest) == (w.shard, w.primary, w.seq, w.digest)
        && types::digest::batch_digest(&b.requests) == w.digest
}

/// Asks every batcher of the shard for the wanted batch at once, each call bounded by
/// [`FETCH_CALL_TIMEOUT`], and hands the core the first answer that [`is_wanted`];
/// forged, wrong or missing answers are passed over, and the round is repeated after
/// `retry` until one serves it. A batch ordered with f + 1 attestations is held by at
/// least one honest batcher, so one Byzantine batcher — withholding, hanging or forging —
/// delays a block by at most one call timeout, never for good.
async fn fetch(w: Wanted, batchers: Vec<Channel>, tx: mpsc::Sender<OfferedBatch>, retry: Duration) {
    let request = pb::FetchRequest {
        shard: w.shard,
        primary: w.primary,
        seq: w.seq,
        digest: w.digest.to_vec(),
    };
    for round in 0u32.. {
        let timeout = fetch_timeout(round);
        let mut calls = tokio::task::JoinSet::new();
        for ch in &batchers {
            let mut client =
                BatcherPeerClient::new(ch.clone()).max_decoding_message_size(wire::limits::BATCH.max_bytes);
            let request = request.clone();
            calls.spawn(async move { tokio::time::timeout(timeout, client.fetch(request)).await });
        }
        while let Some(answer) = calls.join_next().await {
            match answer {
                Ok(Ok(Ok(b))) => {
                    let b = b.into_inner();
                    // The header first: another batch's requests are not even copied.
                    let header = (b.shard, b.primary, b.seq, b.digest.as_slice());
                    if header != (w.shard, w.primary, w.seq, w.digest.as_slice()) {
                        debug!(block = w.block, "a batcher served another batch");
                        continue;
                    }
                    let b = offered(b);
                    if is_wanted(&w, &b) {
                        let _ = tx.send(b).await;
                        return;
                    }
                    debug!(
                        block = w.block,
                        "a batcher served requests that do not hash to the ordered digest"
                    );
                }
                Ok(Ok(Err(s))) => debug!(block = w.block, code = ?s.code(), "fetch failed"),
                Ok(Err(_)) => debug!(block = w.block, "a batcher did not answer the fetch in time"),
                Err(e) => debug!(block = w.block, error = %e, "fetch task"),
            }
        }
        if round >= 3 {
            warn!(
                block = w.block,
                shard = w.shard,
                seq = w.seq,
                "no batcher serves the next block's batch yet"
            );
        }
        tokio::time::sleep(retry).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::wrappers::TcpListenerStream;
    use wire::pb::batcher_peer_server::{BatcherPeer, BatcherPeerServer};

    /// How a stand-in batcher answers `Fetch`.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Answer {
        Honest,
        Hang,
        Forge,
        Refuse,
    }

    struct FakeBatcher {
        answer: Answer,
        batch: pb::Batch,
    }

    type Batches = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = std::result::Result<pb::Batch, tonic::Status>> + Send>,
    >;

    #[tonic::async_trait]
    impl BatcherPeer for FakeBatcher {
        type PullStream = Batches;

        async fn pull(
            &self,
            _r: tonic::Request<pb::PullRequest>,
        ) -> std::result::Result<tonic::Response<Batches>, tonic::Status> {
            Err(tonic::Status::unimplemented("not used"))
        }

        async fn fetch(
            &self,
            _r: tonic::Request<pb::FetchRequest>,
        ) -> std::result::Result<tonic::Response<pb::Batch>, tonic::Status> {
            match self.answer {
                Answer::Honest => Ok(tonic::Response::new(self.batch.clone())),
                Answer::Hang => std::future::pending().await,
                Answer::Refuse => Err(tonic::Status::not_found("not held")),
                Answer::Forge => {
                    // The ordered id and digest, other requests.
                    let mut b = self.batch.clone();
                    b.requests = vec![b"forged".to_vec()];
                    Ok(tonic::Response::new(b))
                }
            }
        }

        async fn ack(
            &self,
            _r: tonic::Request<tonic::Streaming<pb::BatchAttestationFragment>>,
        ) -> std::result::Result<tonic::Response<pb::PeerAck>, tonic::Status> {
            Err(tonic::Status::unimplemented("not used"))
        }

        async fn forward(
            &self,
            _r: tonic::Request<tonic::Streaming<pb::ForwardRequest>>,
        ) -> std::result::Result<tonic::Response<pb::PeerAck>, tonic::Status> {
            Err(tonic::Status::unimplemented("not used"))
        }
    }

    async fn batcher(answer: Answer, batch: pb::Batch) -> Channel {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(BatcherPeerServer::new(FakeBatcher { answer, batch }))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        channel(&format!("http://{at}")).unwrap()
    }

    /// One Byzantine batcher listed first (the assembler's own party, say) that hangs, and
    /// one that serves forged requests under the ordered id and digest, cannot keep the
    /// assembler from the batch an honest batcher holds. (Before: the first call hung for
    /// ever, and a forged answer was handed on and the fetch ended.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hanging_or_forging_batcher_does_not_stall_the_fetch() {
        let requests = vec![b"tx-1".to_vec(), b"tx-2".to_vec()];
        let digest = types::digest::batch_digest(&requests);
        let batch = pb::Batch {
            shard: 0,
            primary: 2,
            seq: 7,
            requests,
            digest: digest.to_vec(),
            ..Default::default()
        };
        let w = Wanted {
            block: 3,
            shard: 0,
            primary: 2,
            seq: 7,
            digest,
        };
        for order in [
            [Answer::Hang, Answer::Forge, Answer::Refuse, Answer::Honest],
            [Answer::Forge, Answer::Hang, Answer::Honest, Answer::Refuse],
        ] {
            let mut batchers = Vec::new();
            for a in order {
                batchers.push(batcher(a, batch.clone()).await);
            }
            let (tx, mut rx) = mpsc::channel(4);
            let task = tokio::spawn(fetch(w, batchers, tx, Duration::from_millis(50)));
            let got = tokio::time::timeout(FETCH_CALL_TIMEOUT * 2, rx.recv())
                .await
                .expect("the honest batcher's batch within a call timeout")
                .unwrap();
            assert_eq!(got.requests.len(), 2);
            assert!(is_wanted(&w, &got));
            task.abort();
        }
    }

    #[test]
    fn header_fields_alone_are_not_trusted() {
        let requests: Vec<Arc<[u8]>> = vec![Arc::from(&b"tx"[..])];
        let digest = types::digest::batch_digest(&requests);
        let w = Wanted {
            block: 0,
            shard: 1,
            primary: 1,
            seq: 1,
            digest,
        };
        let good = OfferedBatch {
            shard: 1,
            primary: 1,
            seq: 1,
            digest,
            requests: requests.clone(),
        };
        assert!(is_wanted(&w, &good));
        let forged = OfferedBatch {
            requests: vec![Arc::from(&b"other"[..])],
            ..good.clone()
        };
        assert!(!is_wanted(&w, &forged));
        let other = OfferedBatch { seq: 2, ..good };
        assert!(!is_wanted(&w, &other));
    }
}
