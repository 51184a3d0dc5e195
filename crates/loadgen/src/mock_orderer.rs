//! The load generator as a mock orderer (`fabrx loadgen --target mock-orderer`,
//! docs/loadgen.md "A mock orderer"): a workload's blocks, pre-built as ordered blocks
//! signed by a quorum of the network's consenter keys, served on an assembler's
//! `Deliver` stream to a real sidecar — the committer measured across processes, apart
//! from the orderer. Statuses come back on the sidecar's notification stream; a tx's
//! latency runs from the first time its block was served to its status.
//!
//! [`ordered_blocks`] is pure: block `i` of the workload becomes ordered block `i`
//! (shard 0, primary 1, seq i + 1, decision i + 1), each chained to the previous one and
//! carrying its txs as envelopes, so the sidecar verifies it as it would a real one.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arma::{DecisionProof, OrderedHeader, Outcome};
use bft::{ChainId, InstanceId, Phase};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use types::Block;
use types::digest::batch_digest;
use wire::pb;
use wire::pb::assembler_server::{Assembler, AssemblerServer};

use crate::Histogram;
use crate::network::envelope;
use crate::series::{Recorder, Schedule, Series};

/// Ordered blocks of `blocks` (numbered from 0), each signed by every key of
/// `consenters` (replica `i` is `consenters[i].0`): the signers must be a quorum.
pub fn ordered_blocks(
    blocks: &[Block],
    consenters: &[(u32, crypto::SigningKey)],
    chain: &ChainId,
) -> Vec<pb::OrderedBlock> {
    let mut previous = [0u8; 32];
    let mut out = Vec::with_capacity(blocks.len());
    for (i, b) in blocks.iter().enumerate() {
        let requests: Vec<Vec<u8>> = b.txs.iter().map(|(id, tx)| envelope(id, tx)).collect();
        let number = i as u64;
        let header = OrderedHeader {
            number,
            previous_hash: previous,
            digest: batch_digest(&requests),
            shard: 0,
            term: 0,
            primary: 1,
            seq: number + 1,
            decision: number + 1,
            index: 0,
            tx_count: u32::try_from(requests.len()).unwrap_or(u32::MAX),
        };
        previous = header.hash();
        let proof = sign(&header, consenters, chain);
        out.push(pb::OrderedBlock {
            header: Some((&header).into()),
            requests,
            proof: Some((&proof).into()),
        });
    }
    out
}

/// The decision proof of a one-header decision, signed as the consenters sign commits.
fn sign(header: &OrderedHeader, consenters: &[(u32, crypto::SigningKey)], chain: &ChainId) -> DecisionProof {
    let metadata = Outcome {
        headers: vec![*header],
        terms: Vec::new(),
        config: None,
    }
    .metadata();
    let requests_root = [0u8; 32];
    let digest = bft::proposal_digest(InstanceId(0), header.decision, &requests_root, &metadata);
    let bytes = bft::vote_bytes(chain, Phase::Commit, InstanceId(0), 0, header.decision, &digest);
    let signatures = consenters
        .iter()
        .map(|(replica, key)| {
            let sig = crypto::sign_decision_certificate(key, &bytes);
            (*replica, bft::Signature(sig.into_bytes()))
        })
        .collect();
    DecisionProof {
        instance: InstanceId(0),
        decision: header.decision,
        view: 0,
        requests_root,
        metadata,
        signatures,
    }
}

/// The Deliver service over pre-built blocks; remembers when each was first served.
#[derive(Clone)]
struct Service {
    blocks: Arc<Vec<pb::OrderedBlock>>,
    served: Arc<Mutex<Vec<Option<Instant>>>>,
}

type BlockStream = Pin<Box<dyn Stream<Item = Result<pb::OrderedBlock, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl Assembler for Service {
    type DeliverStream = BlockStream;

    async fn deliver(
        &self,
        request: tonic::Request<pb::DeliverRequest>,
    ) -> Result<tonic::Response<BlockStream>, tonic::Status> {
        let r = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        let (blocks, served) = (self.blocks.clone(), self.served.clone());
        tokio::spawn(async move {
            let from = usize::try_from(r.from).unwrap_or(usize::MAX);
            for (i, b) in blocks.iter().enumerate().skip(from) {
                if r.to.is_some_and(|to| i as u64 > to) {
                    return;
                }
                let mut b = b.clone();
                if r.headers_only {
                    b.requests.clear();
                }
                if tx.send(Ok(b)).await.is_err() {
                    return;
                }
                let mut s = served.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(slot) = s.get_mut(i)
                    && slot.is_none()
                {
                    *slot = Some(Instant::now());
                }
            }
            if !r.to_end && r.to.is_none() {
                // Following: nothing more will come; keep the stream open.
                tx.closed().await;
            }
        });
        Ok(tonic::Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn fetch_batch(
        &self,
        _request: tonic::Request<pb::FetchRequest>,
    ) -> Result<tonic::Response<pb::Batch>, tonic::Status> {
        Err(tonic::Status::unimplemented(
            "a mock orderer serves its blocks with Deliver only",
        ))
    }
}

/// What a mock-orderer run saw.
#[derive(Debug, Clone)]
pub struct MockRun {
    /// The status of every tx of every block (`None`: none arrived).
    pub statuses: Vec<Vec<Option<String>>>,
    /// First serve of the first measured block to the last status.
    pub seconds: f64,
    /// Block served to tx status, in microseconds, for the measured blocks.
    pub latency_us: Histogram,
    /// Per second of the measured blocks, from the first serve of the first: `sent` and
    /// `acked` are the txs of the blocks first served in that second.
    pub series: Series,
}

/// Subscribes to the statuses of `ids` (by block) on the sidecar at `sidecar`: the
/// watcher, its queue of ids (it stops when the queue closes), its events, and each tx's block and index in it by its index in the flattened
/// ids.
async fn watch(
    sidecar: &str,
    ids: &[Vec<String>],
) -> crate::Result<(
    tokio::task::JoinHandle<()>,
    mpsc::Sender<std::ops::Range<usize>>,
    mpsc::Receiver<Vec<crate::network::Decided>>,
    Vec<(usize, usize)>,
)> {
    let (ids_tx, ids_rx) = mpsc::channel::<std::ops::Range<usize>>(ids.len().max(1));
    let (ev_tx, events) = mpsc::channel::<Vec<crate::network::Decided>>(4096);
    let load = Arc::new(crate::network::Load::from_envelopes(
        ids.iter().flatten().map(|id| (id.clone(), [])),
    ));
    let watcher = tokio::spawn(crate::network::watch_sidecar(
        crate::network::channel(sidecar)?,
        load,
        ids_rx,
        ev_tx,
    ));
    // Each tx of the flattened ids: its block and its index in the block.
    let mut at: Vec<(usize, usize)> = Vec::new();
    for (b, block_ids) in ids.iter().enumerate() {
        let first = at.len();
        at.extend((0..block_ids.len()).map(|i| (b, i)));
        let _ = ids_tx.send(first..at.len()).await;
    }
    Ok((watcher, ids_tx, events, at))
}

/// Serves `blocks` on `listen` and collects the statuses of their txs (`ids`, by block)
/// from the sidecar at `sidecar` (`http://…`), until all arrived or `drain` passed without
/// one. Blocks before `measure_from` (the genesis) are served but not measured.
pub async fn serve(
    listen: SocketAddr,
    blocks: Vec<pb::OrderedBlock>,
    ids: &[Vec<String>],
    measure_from: usize,
    sidecar: &str,
    drain: Duration,
) -> crate::Result<MockRun> {
    let served = Arc::new(Mutex::new(vec![None; blocks.len()]));
    let svc = Service {
        blocks: Arc::new(blocks),
        served: served.clone(),
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| crate::network::failed(&format!("listening on {listen}: {e}")))?;
    let server = wire::node::serve(listener, &wire::server::ServerLimits::default(), |b| {
        b.add_service(AssemblerServer::new(svc).max_encoding_message_size(64 << 20))
    })
    .map_err(|e| crate::network::failed(&e.to_string()))?;
    // `_ids` keeps the watcher's queue open: it stops when the queue closes.
    let (watcher, _ids, mut events, at) = watch(sidecar, ids).await?;
    let mut decided = Vec::new().into_iter();
    let mut statuses: Vec<Vec<Option<String>>> = ids.iter().map(|b| vec![None; b.len()]).collect();
    let total: usize = ids.iter().map(Vec::len).sum();
    let mut got = 0usize;
    let mut latency_us = Histogram::new();
    // (status instant, block, index) of the measured txs, in arrival order.
    let mut arrivals: Vec<(Instant, usize, usize)> = Vec::new();
    let mut last = Instant::now();
    while got < total {
        let crate::network::Decided { index, status, .. } = match decided.next() {
            Some(d) => d,
            None => match tokio::time::timeout(drain, events.recv()).await {
                Ok(Some(batch)) => {
                    decided = batch.into_iter();
                    continue;
                }
                _ => break,
            },
        };
        let Some(&(b, i)) = at.get(index) else {
            continue;
        };
        if statuses[b][i].is_some() {
            continue;
        }
        statuses[b][i] = Some(status.to_string());
        got += 1;
        last = Instant::now();
        let first = served.lock().unwrap_or_else(|e| e.into_inner())[b];
        if b >= measure_from
            && let Some(t) = first
        {
            latency_us.record(
                u64::try_from(last.duration_since(t).as_micros()).unwrap_or(u64::MAX),
                1,
            );
            arrivals.push((last, b, i));
        }
    }
    watcher.abort();
    server.stop(Duration::ZERO).await;
    let start = served
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(measure_from)
        .copied()
        .flatten()
        .unwrap_or(last);
    let served = served.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let series = series(&served, ids, measure_from, &arrivals, &statuses, start, last);
    Ok(MockRun {
        statuses,
        seconds: last.saturating_duration_since(start).as_secs_f64(),
        latency_us,
        series,
    })
}

/// The per-second series of the measured blocks from `start` to `end`.
fn series(
    served: &[Option<Instant>],
    ids: &[Vec<String>],
    measure_from: usize,
    arrivals: &[(Instant, usize, usize)],
    statuses: &[Vec<Option<String>>],
    start: Instant,
    end: Instant,
) -> Series {
    let mut r = Recorder::new(&Schedule::Unpaced);
    let since = |t: Instant| t.saturating_duration_since(start);
    for (b, at) in served.iter().enumerate().skip(measure_from) {
        if let Some(at) = at {
            let n = ids.get(b).map_or(0, Vec::len) as u64;
            r.on_sent(since(*at), n);
            r.on_acked(since(*at), n);
        }
    }
    for (at, b, i) in arrivals {
        if let (Some(Some(sent)), Some(status)) = (served.get(*b), statuses[*b][*i].as_deref()) {
            r.on_final(since(*at), since(*sent), status, 1);
        }
    }
    r.finish(since(end))
}
