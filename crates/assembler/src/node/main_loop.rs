//! The main loop: feeds decisions and batches to the core, fetches the next block's
//! batch from any batcher of its shard when it is missing, and appends complete blocks
//! to the ledger (synced) before the Deliver streams see them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arma::{DecisionProof, Request, VerifiedDecision};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tracing::{debug, info, warn};
use types::{PartyId, ShardId};
use wire::pb;
use wire::pb::assembler_client::AssemblerClient;
use wire::pb::batcher_peer_client::BatcherPeerClient;

#[cfg(test)]
use super::channel;
use super::follow::Decided;
use super::prefetch::{LaneView, offered};
use super::{Error, Result};
use crate::core::{Block, Core, OfferedBatch, Wanted};
use crate::metrics::{Metrics, gauge_value};
use crate::store::BlockStore;

pub(super) struct MainLoop {
    pub(super) core: Core,
    /// The store (`None` while a blocking append holds it).
    pub(super) store: Option<BlockStore>,
    pub(super) lanes: Vec<watch::Sender<LaneView>>,
    /// Parties of the config in force (the primaries' rotation) and that config's
    /// sequence.
    pub(super) parties: (arma::Parties, u64),
    /// This assembler's party.
    pub(super) party: PartyId,
    /// Since when a config in force removed its party: it serves its blocks for
    /// `arma::LEAVE_GRACE_MS`, follows nothing more, then stops.
    pub(super) leaving: Option<std::time::Instant>,
    /// The network's config rules: a decision's config is read for the parties and
    /// batchers it adds (`None`: configs are not read).
    pub(super) rules: Option<std::sync::Arc<dyn arma::ConfigRules>>,
    /// The batchers in `batchers`, by party and shard.
    pub(super) linked: std::collections::BTreeSet<(PartyId, ShardId)>,
    pub(super) batchers: BTreeMap<ShardId, Vec<Channel>>,
    /// The other parties' assemblers (`FetchBatch`).
    pub(super) assemblers: Vec<Channel>,
    pub(super) tx_batches: mpsc::Sender<OfferedBatch>,
    /// The block whose batch is being fetched.
    pub(super) fetching: Option<(u64, JoinHandle<()>)>,
    pub(super) retry: Duration,
    pub(super) metrics: Metrics,
}

impl MainLoop {
    pub(super) async fn run(
        mut self,
        mut rx_decisions: mpsc::Receiver<Decided>,
        mut rx_batches: mpsc::Receiver<OfferedBatch>,
        mut rx_stop: watch::Receiver<bool>,
    ) -> Result<()> {
        let mut tick = tokio::time::interval(self.retry);
        loop {
            if let Some(since) = self.leaving {
                if since.elapsed() >= Duration::from_millis(arma::LEAVE_GRACE_MS) {
                    return Err(Error::PartyLeft(self.party));
                }
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = rx_stop.wait_for(|s| *s) => return Ok(()),
                }
                continue;
            }
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
        let m = &self.metrics;
        m.queued_headers.set(gauge_value(self.core.queued()));
        m.prefetch_bytes.set(gauge_value(self.core.index_bytes()));
    }

    /// A config in force: its parties rotate the primaries, and a party that joined
    /// has its batchers fetched from (docs/reconfiguration.md "Adding a party").
    pub(super) fn follow_config(&mut self, view: &arma::ConfigView) {
        if view.sequence >= self.parties.1 {
            self.parties = (view.parties.clone(), view.sequence);
        }
        for ((party, shard), endpoint) in &view.batcher_endpoints {
            if self.linked.contains(&(*party, *shard)) {
                continue;
            }
            match super::channel(endpoint) {
                Ok(c) => {
                    self.batchers.entry(*shard).or_default().push(c);
                    self.linked.insert((*party, *shard));
                    info!(
                        party,
                        shard, "a joined party's batcher is fetched from from now on"
                    );
                }
                Err(e) => warn!(party, shard, error = %e, "a joined party's batcher endpoint is not usable"),
            }
        }
    }

    fn on_decision(&mut self, d: &VerifiedDecision, proof: Arc<DecisionProof>) -> Result<()> {
        self.core.on_decision(proof, &d.headers, &d.terms)?;
        // Before the term changes below: their primaries rotate over the new parties.
        if let (Some((_, config)), Some(rules)) = (&d.config, self.rules.clone()) {
            match rules.view(config) {
                Ok(view) if view.has_left(self.party) => {
                    info!(
                        party = self.party,
                        decision = d.number,
                        grace_ms = arma::LEAVE_GRACE_MS,
                        "a config in force removed this assembler's party: it serves its blocks for a while, then stops"
                    );
                    self.leaving = Some(std::time::Instant::now());
                }
                Ok(view) => self.follow_config(&view),
                Err(e) => warn!(error = %e, "the config a decision put in force does not parse"),
            }
        }
        // A config block's data is the config the decision carried (its hash certified).
        if let Some((_, config)) = &d.config
            && let Some(h) = d.headers.iter().find(|h| h.is_config())
            && let Err(e) = self.core.offer(OfferedBatch {
                shard: h.shard,
                primary: h.primary,
                seq: h.seq,
                digest: h.digest,
                requests: vec![Request::from(config.as_slice())],
            })
        {
            debug!(error = %e, "config block refused");
        }
        self.metrics.decisions.inc();
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
                    primary: arma::primary_of(t.shard, t.term, &self.parties.0),
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
        let m = &self.metrics;
        m.blocks.inc_by(count as u64);
        m.txs.inc_by(txs as u64);
        m.append_seconds.observe(began.elapsed().as_secs_f64());
        m.height.set(gauge_value(height));
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
        let sources = self
            .batchers
            .get(&w.shard)
            .into_iter()
            .flatten()
            .map(|c| Source::Batcher(c.clone()))
            .chain(self.assemblers.iter().map(|c| Source::Assembler(c.clone())))
            .collect();
        let tx = self.tx_batches.clone();
        let retry = self.retry;
        let task = tokio::spawn(fetch(w, sources, tx, retry));
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

/// Where a missing batch may be fetched from.
#[derive(Clone, Debug)]
pub(super) enum Source {
    /// A batcher of the shard (`BatcherPeer.Fetch`).
    Batcher(Channel),
    /// Another party's assembler (`Assembler.FetchBatch`: a batch it appended).
    Assembler(Channel),
}

impl Source {
    async fn fetch(
        self,
        request: pb::FetchRequest,
    ) -> std::result::Result<tonic::Response<pb::Batch>, tonic::Status> {
        let max = wire::limits::BATCH.max_bytes;
        match self {
            Source::Batcher(ch) => {
                BatcherPeerClient::new(ch)
                    .max_decoding_message_size(max)
                    .fetch(request)
                    .await
            }
            Source::Assembler(ch) => {
                AssemblerClient::new(ch)
                    .max_decoding_message_size(max)
                    .fetch_batch(request)
                    .await
            }
        }
    }
}

/// Asks every batcher of the shard and every other assembler for the wanted batch at once, each call bounded by
/// [`FETCH_CALL_TIMEOUT`], and hands the core the first answer that [`is_wanted`];
/// forged, wrong or missing answers are passed over, and the round is repeated after
/// `retry` until one serves it. A batch ordered with f + 1 attestations is held by at
/// least one honest batcher, so one Byzantine batcher — withholding, hanging or forging —
/// delays a block by at most one call timeout, never for good.
async fn fetch(w: Wanted, sources: Vec<Source>, tx: mpsc::Sender<OfferedBatch>, retry: Duration) {
    let request = pb::FetchRequest {
        shard: w.shard,
        primary: w.primary,
        seq: w.seq,
        digest: w.digest.to_vec(),
    };
    for round in 0u32.. {
        let timeout = fetch_timeout(round);
        let mut calls = tokio::task::JoinSet::new();
        for source in &sources {
            let (source, request) = (source.clone(), request.clone());
            calls.spawn(async move { tokio::time::timeout(timeout, source.fetch(request)).await });
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
                batchers.push(Source::Batcher(batcher(a, batch.clone()).await));
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

    /// Another party's assembler, serving a block of its ledger with `FetchBatch`.
    async fn assembler_holding(block: &crate::core::Block) -> (Channel, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = BlockStore::open(dir.path()).unwrap();
        store.append(block).unwrap();
        let service = crate::deliver::DeliverService::new(
            store.reader(),
            crate::deliver::DeliverLimits::default(),
            prometheus::IntGauge::new("streams", "streams").unwrap(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service.into_server())
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        (channel(&format!("http://{at}")).unwrap(), dir)
    }

    /// Every batcher withholds the batch (the one correct batcher that held it is gone,
    /// the others hang, refuse or forge), but another party's assembler appended it: the
    /// fetch gets it from that assembler. (Before: fetched batches were never served
    /// onwards, and such an assembler stalled for good.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_no_batcher_serves_is_fetched_from_another_assembler() {
        let requests: Vec<Arc<[u8]>> = vec![Arc::from(&b"tx-1"[..]), Arc::from(&b"tx-2"[..])];
        let digest = types::digest::batch_digest(&requests);
        let header = arma::OrderedHeader {
            number: 0,
            previous_hash: [0; 32],
            digest,
            shard: 1,
            term: 0,
            primary: 2,
            seq: 7,
            decision: 1,
            index: 0,
            tx_count: 2,
        };
        let block = crate::core::Block {
            header,
            requests: requests.clone(),
            proof: Arc::new(arma::DecisionProof {
                instance: bft::InstanceId(0),
                decision: 1,
                view: 0,
                requests_root: [0; 32],
                metadata: Vec::new(),
                signatures: Vec::new(),
            }),
        };
        let (peer, _dir) = assembler_holding(&block).await;
        let wire_batch = pb::Batch {
            shard: 1,
            primary: 2,
            seq: 7,
            requests: requests.iter().map(|r| r.to_vec()).collect(),
            digest: digest.to_vec(),
            ..Default::default()
        };
        let mut sources = Vec::new();
        for a in [Answer::Hang, Answer::Refuse, Answer::Forge] {
            sources.push(Source::Batcher(batcher(a, wire_batch.clone()).await));
        }
        sources.push(Source::Assembler(peer.clone()));
        let w = Wanted {
            block: 0,
            shard: 1,
            primary: 2,
            seq: 7,
            digest,
        };
        let (tx, mut rx) = mpsc::channel(4);
        let task = tokio::spawn(fetch(w, sources, tx, Duration::from_millis(50)));
        let got = tokio::time::timeout(FETCH_CALL_TIMEOUT * 2, rx.recv())
            .await
            .expect("the other assembler's batch within a call timeout")
            .unwrap();
        assert!(is_wanted(&w, &got));
        task.abort();
        // A batch that assembler does not hold is NOT_FOUND there, not a hang.
        let mut client = AssemblerClient::new(peer);
        let missing = client
            .fetch_batch(pb::FetchRequest {
                shard: 1,
                primary: 2,
                seq: 8,
                digest: digest.to_vec(),
            })
            .await
            .unwrap_err();
        assert_eq!(missing.code(), tonic::Code::NotFound);
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
