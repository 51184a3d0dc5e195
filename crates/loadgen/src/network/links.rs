//! The links of a network run: one persistent `Router.SubmitMany` stream per router
//! (many txs per message, their answers matched by id), the committer's notification
//! stream (or an assembler's Deliver stream), and where the committer or the ledger
//! stood when the run began.
//!
//! The run hands each link ranges of tx indexes; a link reads the txs' envelopes from
//! the shared [`Load`] as it writes a message, and hands the run each answer message's
//! acks at once ([`Acks`]). Every queue is bounded: a router link's by the run's
//! in-flight bound in txs, counted as they are queued and taken.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use types::Status;
use wire::pb;
use wire::pb::sidecar_client::SidecarClient;

use super::load::Load;
use super::many::{Answers, Batch, MAX_BATCH_BYTES, MAX_BATCH_TXS, ManyCodec, Pending, SUBMIT_MANY};
use super::tally::{Acks, Answer, Reason};
use super::{Endpoints, failed};

/// The links to the network of one run.
pub(super) struct Links {
    pub(super) routers: Vec<RouterLink>,
    pub(super) acks: mpsc::Receiver<Acks>,
    pub(super) ids: mpsc::Sender<Range<usize>>,
    pub(super) events: mpsc::Receiver<Vec<Decided>>,
    pub(super) tasks: tokio::task::JoinSet<()>,
    /// Statuses in blocks below this were decided before the run began.
    pub(super) first_block: u64,
    /// When each router's link was first seen full, while it is.
    full_since: Vec<Option<Instant>>,
}

/// The run's end of one router's link: a queue of tx ranges holding at most `bound`
/// txs.
pub(super) struct RouterLink {
    tx: mpsc::Sender<Range<usize>>,
    queued: Arc<AtomicUsize>,
    bound: usize,
}

impl RouterLink {
    /// Txs the queue has room for.
    fn free(&self) -> usize {
        self.bound.saturating_sub(self.queued.load(Ordering::Relaxed))
    }

    /// Queues as many of `range`'s first txs as there is room for; returns how many.
    /// `Err`: the link stopped.
    pub(super) fn offer(&self, range: Range<usize>) -> Result<usize, ()> {
        let take = self.free().min(range.len());
        if take == 0 {
            return Ok(0);
        }
        self.queued.fetch_add(take, Ordering::Relaxed);
        match self.tx.try_send(range.start..range.start + take) {
            Ok(()) => Ok(take),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.queued.fetch_sub(take, Ordering::Relaxed);
                Ok(0)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        }
    }
}

/// How long a router's link may stay full before the run stops waiting for it: its
/// router is stuck (or far behind), and txs go to the others without it, answered
/// `backlog` for it.
pub(super) const STUCK_AFTER: Duration = Duration::from_secs(2);

impl Links {
    /// Whether the status watcher's queue has room for one more batch of ids.
    pub(super) fn can_subscribe(&self) -> bool {
        self.ids.capacity() > 0
    }

    /// How many txs can be handed to the links now: the least room among the routers'
    /// links, not counting a link full for [`STUCK_AFTER`] (its txs are answered
    /// `backlog`). Notes when each link was first seen full.
    pub(super) fn room(&mut self, now: Instant) -> usize {
        let mut room = usize::MAX;
        for (r, since) in self.routers.iter().zip(self.full_since.iter_mut()) {
            let free = r.free();
            if free > 0 {
                *since = None;
                room = room.min(free);
            } else if now.duration_since(*since.get_or_insert(now)) < STUCK_AFTER {
                room = 0;
            }
        }
        room
    }
}

/// A final status the committer (or the orderer) reported for a tx.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decided {
    /// The tx's index in the run's load.
    pub index: usize,
    /// The status's name (`ORDERED` from an assembler).
    pub status: Arc<str>,
    /// The block it was decided in.
    pub block: u64,
}

/// Opens a stream to every router and the status watcher, every queue bounded by
/// `bound` txs in flight, after asking where the committer (or the assembler's ledger)
/// stands: statuses in blocks below it are not this run's.
pub(super) async fn links(endpoints: &Endpoints, load: &Arc<Load>, bound: usize) -> crate::Result<Links> {
    let n = endpoints.routers.len();
    if n == 0 {
        return Err(crate::Error::InvalidParam {
            flag: "network",
            detail: "the network has no routers".into(),
        });
    }
    let (ack_tx, acks) = mpsc::channel::<Acks>(bound.saturating_mul(n).saturating_add(16));
    let mut routers = Vec::with_capacity(n);
    let mut tasks = tokio::task::JoinSet::new();
    for (router, uri) in endpoints.routers.iter().enumerate() {
        // Each range holds a tx at least, so `bound` txs are never more ranges.
        let (tx, rx) = mpsc::channel(bound.saturating_add(16));
        let queued = Arc::new(AtomicUsize::new(0));
        routers.push(RouterLink {
            tx,
            queued: queued.clone(),
            bound,
        });
        tasks.spawn(router_link(RouterTask {
            router,
            channel: channel(uri)?,
            load: load.clone(),
            rx,
            queued,
            acks: ack_tx.clone(),
        }));
    }
    let (ids, ids_rx) = mpsc::channel::<Range<usize>>(bound.saturating_add(16));
    let (ev_tx, events) = mpsc::channel::<Vec<Decided>>(bound.saturating_add(16));
    let first_block = match &endpoints.sidecar {
        Some(uri) => {
            let channel = channel(uri)?;
            let first = committer_next_block(channel.clone()).await?;
            tasks.spawn(watch_sidecar(channel, load.clone(), ids_rx, ev_tx));
            first
        }
        None => {
            let channel = channel(&endpoints.assembler)?;
            let first = ledger_height(channel.clone()).await?;
            tasks.spawn(watch_assembler(channel, load.clone(), first, ids_rx, ev_tx));
            first
        }
    };
    Ok(Links {
        full_since: vec![None; routers.len()],
        routers,
        acks,
        ids,
        events,
        tasks,
        first_block,
    })
}

/// How long the run waits for the committer or the assembler to say where it stands.
const STANDING_TIMEOUT: Duration = Duration::from_secs(30);

/// The committer's next block (`Sidecar.GetNextBlock`), asked until it answers or
/// [`STANDING_TIMEOUT`] passed.
async fn committer_next_block(channel: tonic::transport::Channel) -> crate::Result<u64> {
    let deadline = Instant::now() + STANDING_TIMEOUT;
    loop {
        let mut client = SidecarClient::new(channel.clone());
        match client.get_next_block(pb::LastCommittedRequest {}).await {
            Ok(r) => return Ok(r.into_inner().number),
            Err(status) if Instant::now() >= deadline => {
                return Err(failed(&format!(
                    "the committer's sidecar did not say its next block: {status}"
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}

/// The number of blocks the assembler at `channel` holds (the first block number it
/// does not hold), found by probing: doubling, then bisecting.
async fn ledger_height(channel: tonic::transport::Channel) -> crate::Result<u64> {
    let deadline = Instant::now() + STANDING_TIMEOUT;
    let has = |n: u64| {
        let channel = channel.clone();
        async move {
            loop {
                if let Some(held) =
                    clients::deliver::has_block(channel.clone(), n, Duration::from_secs(5)).await
                {
                    return Ok(held);
                }
                if Instant::now() >= deadline {
                    return Err(failed("the assembler did not answer whether it holds a block"));
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    };
    if !has(0).await? {
        return Ok(0);
    }
    // Held: lo; not held: hi.
    let (mut lo, mut hi) = (0u64, 1u64);
    while has(hi).await? {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if has(mid).await? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(hi)
}

pub(crate) fn channel(uri: &str) -> crate::Result<tonic::transport::Channel> {
    clients::channel::lazy(uri, clients::channel::DEFAULT_CONNECT_TIMEOUT).map_err(|e| {
        crate::Error::InvalidParam {
            flag: "network",
            detail: e.to_string(),
        }
    })
}

/// What one router's link task owns.
struct RouterTask {
    router: usize,
    channel: tonic::transport::Channel,
    load: Arc<Load>,
    rx: mpsc::Receiver<Range<usize>>,
    /// Txs in `rx` and not yet in a message (shared with the run's [`RouterLink`]).
    queued: Arc<AtomicUsize>,
    acks: mpsc::Sender<Acks>,
}

impl RouterTask {
    /// Answers `txs` as failed for `reason`, in one message.
    async fn fail(&self, txs: Vec<usize>, reason: Reason) {
        if txs.is_empty() {
            return;
        }
        let answers = txs.into_iter().map(|tx| (tx, Answer::Failed(reason))).collect();
        let _ = self
            .acks
            .send(Acks {
                router: self.router,
                answers,
            })
            .await;
    }

    /// Takes queued txs (`carry` first) into one batch of at most [`MAX_BATCH_TXS`] txs
    /// and about [`MAX_BATCH_BYTES`] of envelopes; what does not fit stays in `carry`.
    fn gather(&mut self, carry: &mut Option<Range<usize>>, pending: &mut Pending) -> Batch {
        let (mut txs, mut count, mut bytes) = (Vec::new(), 0usize, 0usize);
        while count < MAX_BATCH_TXS {
            let Some(r) = carry.take().or_else(|| self.rx.try_recv().ok()) else {
                break;
            };
            let mut end = r.start;
            while end < r.end && count < MAX_BATCH_TXS {
                let len = self.load.envelope_len(end);
                if count > 0 && bytes + len > MAX_BATCH_BYTES {
                    break;
                }
                bytes += len;
                count += 1;
                end += 1;
            }
            if end > r.start {
                txs.push(r.start..end);
            }
            if end < r.end {
                *carry = Some(end..r.end);
                break;
            }
        }
        for i in txs.iter().cloned().flatten() {
            pending.insert(i);
        }
        self.queued.fetch_sub(count, Ordering::Relaxed);
        Batch {
            load: self.load.clone(),
            txs,
        }
    }

    /// Takes what arrives for half a second (and `carry`) and answers it as failed:
    /// the router could not be reached. `false`: the run ended.
    async fn fail_for_a_while(&mut self, carry: &mut Option<Range<usize>>) -> bool {
        let until = tokio::time::Instant::now() + Duration::from_millis(500);
        let mut failed: Vec<usize> = carry.take().into_iter().flatten().collect();
        loop {
            while let Ok(r) = self.rx.try_recv() {
                self.queued.fetch_sub(r.len(), Ordering::Relaxed);
                failed.extend(r);
            }
            self.fail(std::mem::take(&mut failed), Reason::Unavailable).await;
            match tokio::time::timeout_at(until, self.rx.recv()).await {
                Ok(Some(r)) => {
                    self.queued.fetch_sub(r.len(), Ordering::Relaxed);
                    failed.extend(r);
                }
                Ok(None) => return false,
                Err(_) => return true,
            }
        }
    }
}

/// Opens a `SubmitMany` stream that sends the batches of `rx`.
async fn submit_many(
    channel: tonic::transport::Channel,
    rx: mpsc::Receiver<Batch>,
) -> Result<tonic::Streaming<Answers>, tonic::Status> {
    let mut grpc =
        tonic::client::Grpc::new(channel).max_decoding_message_size(wire::limits::SUBMIT_ANSWERS.max_bytes);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(SUBMIT_MANY);
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request
        .extensions_mut()
        .insert(tonic::GrpcMethod::new("fabrx.v1.Router", "SubmitMany"));
    Ok(grpc.streaming(request, path, ManyCodec).await?.into_inner())
}

/// One router's persistent `SubmitMany` stream, reopened after a failure: whatever is
/// queued goes in one message (up to a batch's size) as soon as the stream takes one;
/// each answer message becomes one [`Acks`]. Answers are matched to pending txs by id
/// (the tx index); one for a tx not pending (never sent, or answered already) is
/// ignored.
async fn router_link(mut task: RouterTask) {
    let mut pending = Pending::new(task.load.len());
    let mut carry: Option<Range<usize>> = None;
    loop {
        // Two messages on their way at most: the rest waits in the run's queue, where
        // its room is counted.
        let (req_tx, req_rx) = mpsc::channel::<Batch>(2);
        let opened =
            tokio::time::timeout(Duration::from_secs(5), submit_many(task.channel.clone(), req_rx)).await;
        let mut responses = match opened {
            Ok(Ok(r)) => r,
            _ => {
                // Down: what arrives meanwhile is answered as failed, for a while.
                if !task.fail_for_a_while(&mut carry).await {
                    return;
                }
                continue;
            }
        };
        loop {
            tokio::select! {
                m = task.rx.recv(), if carry.is_none() => match m {
                    Some(r) => carry = Some(r),
                    None => return,
                },
                permit = req_tx.reserve(), if carry.is_some() => {
                    let Ok(permit) = permit else { break };
                    permit.send(task.gather(&mut carry, &mut pending));
                }
                r = responses.message() => match r {
                    Ok(Some(msg)) => {
                        let answers: Vec<(usize, Answer)> = msg
                            .into_iter()
                            .filter_map(|(id, code)| {
                                let tx = usize::try_from(id).ok()?;
                                pending.take(tx).then(|| (tx, Answer::of_code(code)))
                            })
                            .collect();
                        if !answers.is_empty() {
                            let acks = Acks { router: task.router, answers };
                            if task.acks.send(acks).await.is_err() {
                                return;
                            }
                        }
                    }
                    _ => break,
                },
            }
        }
        task.fail(pending.drain(), Reason::StreamFailed).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The committer's notification stream: subscribes to every tx sent, reopens after a
/// failure and subscribes again to the txs still unconfirmed.
pub(crate) async fn watch_sidecar(
    channel: tonic::transport::Channel,
    load: Arc<Load>,
    mut ids: mpsc::Receiver<Range<usize>>,
    events: mpsc::Sender<Vec<Decided>>,
) {
    let mut waiting = Pending::new(load.len());
    let mut outgoing: Vec<Vec<String>> = Vec::new();
    let names = |txs: &mut dyn Iterator<Item = usize>| -> Vec<String> {
        txs.map(|i| load.id(i).into_owned()).collect()
    };
    loop {
        let (req_tx, req_rx) = mpsc::channel::<pb::SubscribeRequest>(64);
        let mut client = SidecarClient::new(channel.clone()).max_decoding_message_size(16 << 20);
        let mut stream = match client.subscribe(ReceiverStream::new(req_rx)).await {
            Ok(s) => s.into_inner(),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        // Everything still unconfirmed, again (a status decided meanwhile is sent too).
        let all = waiting.indexes();
        for chunk in all.chunks(1000) {
            outgoing.push(names(&mut chunk.iter().copied()));
        }
        loop {
            tokio::select! {
                m = ids.recv(), if outgoing.is_empty() => match m {
                    Some(range) => {
                        for i in range.clone() {
                            waiting.insert(i);
                        }
                        outgoing.push(names(&mut range.into_iter()));
                    }
                    None => return,
                },
                permit = req_tx.reserve(), if !outgoing.is_empty() => {
                    let Ok(permit) = permit else { break };
                    permit.send(pb::SubscribeRequest { tx_ids: outgoing.remove(0) });
                }
                e = stream.message() => match e {
                    Ok(Some(ev)) => {
                        let Some(st) = ev.status else { continue };
                        let Some(index) = load.index_of(st.tx_id.as_bytes()) else { continue };
                        if waiting.take(index) {
                            let name = Status::from_code(st.code)
                                .map_or_else(|_| format!("CODE_{}", st.code), |s| s.name().to_string());
                            let decided = Decided { index, status: name.into(), block: st.block };
                            if events.send(vec![decided]).await.is_err() {
                                return;
                            }
                        }
                    }
                    _ => break,
                },
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Without a committer: an assembler's Deliver stream from block `first` (its height
/// when the run began: earlier blocks cannot hold this run's txs), following; each tx
/// of ours whose id appears in a block is `ORDERED` (one event message per block).
async fn watch_assembler(
    channel: tonic::transport::Channel,
    load: Arc<Load>,
    first: u64,
    mut ids: mpsc::Receiver<Range<usize>>,
    events: mpsc::Sender<Vec<Decided>>,
) {
    let mut waiting = Pending::new(load.len());
    let mut next = first;
    loop {
        let request = pb::DeliverRequest {
            from: next,
            to: None,
            headers_only: false,
            to_end: false,
        };
        let mut stream = match super::blocks::open(channel.clone(), request, load.clone()).await {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        let ordered: Arc<str> = Arc::from("ORDERED");
        loop {
            tokio::select! {
                m = ids.recv() => match m {
                    Some(range) => range.for_each(|i| waiting.insert(i)),
                    None => return,
                },
                b = stream.message() => match b {
                    Ok(Some(b)) => {
                        // A tx's id is queued here before the tx goes to any router,
                        // so every id a block can hold is queued by now; a block read
                        // before them would pass them by for good.
                        while let Ok(range) = ids.try_recv() {
                            range.for_each(|i| waiting.insert(i));
                        }
                        let block = b.number.unwrap_or(next);
                        next = block.saturating_add(1);
                        let decided: Vec<Decided> = b
                            .txs
                            .into_iter()
                            .filter(|&index| waiting.take(index))
                            .map(|index| Decided { index, status: ordered.clone(), block })
                            .collect();
                        if !decided.is_empty() && events.send(decided).await.is_err() {
                            return;
                        }
                    }
                    _ => break,
                },
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::{self, RouterMode, SinkRouter};

    /// Blocks ready on the Deliver stream while the ids of their txs still wait in the
    /// watcher's queue (a watcher behind a fast network): every id is still confirmed.
    /// A watcher that read a block before taking the queued ids passed its txs by.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ids_queued_before_a_block_are_taken_before_it_is_read() {
        let n = 200;
        let s = sink::start(&[SinkRouter {
            mode: RouterMode::Admit,
            orders: true,
        }])
        .await
        .unwrap();
        let ids: Vec<String> = (0..n).map(|i| format!("w-{i:04}")).collect();
        // One block per tx: each submitted and answered before the next.
        let mut router =
            wire::pb::router_client::RouterClient::new(channel(&format!("http://{}", s.routers[0])).unwrap());
        for (i, id) in ids.iter().enumerate() {
            let env = super::super::envelope(&types::TxId(id.clone()), &types::Tx::default());
            let req = pb::SubmitRequest {
                id: i as u64,
                envelope: env,
            };
            let mut answers = router
                .submit(tokio_stream::iter([req]))
                .await
                .unwrap()
                .into_inner();
            answers.message().await.unwrap().unwrap();
            while s.height() < i as u64 + 1 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        // Every id queued, one send each, before the watcher starts.
        let load = Arc::new(Load::from_envelopes(ids.iter().map(|id| (id.clone(), []))));
        let (ids_tx, ids_rx) = mpsc::channel(n + 1);
        for i in 0..n {
            ids_tx.try_send(i..i + 1).unwrap();
        }
        let (ev_tx, mut events) = mpsc::channel(n + 1);
        let assembler = channel(&format!("http://{}", s.assembler)).unwrap();
        let watcher = tokio::spawn(watch_assembler(assembler, load, 0, ids_rx, ev_tx));
        let mut confirmed = 0;
        while let Ok(Some(batch)) = tokio::time::timeout(Duration::from_secs(3), events.recv()).await {
            confirmed += batch.len();
        }
        watcher.abort();
        assert_eq!(confirmed, n);
    }
}
