//! The links of a network run: one persistent `Router.Submit` stream per router, the
//! committer's notification stream (or an assembler's Deliver stream), and where the
//! committer or the ledger stood when the run began.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use types::Status;
use wire::pb;
use wire::pb::router_client::RouterClient;
use wire::pb::sidecar_client::SidecarClient;

use super::tally::{Ack, Answer};
use super::{Endpoints, failed};

/// The links to the network of one run.
pub(super) struct Links {
    pub(super) routers: Vec<mpsc::Sender<(usize, Arc<Vec<u8>>)>>,
    pub(super) acks: mpsc::Receiver<Ack>,
    pub(super) ids: mpsc::Sender<Vec<String>>,
    pub(super) events: mpsc::Receiver<Decided>,
    pub(super) tasks: tokio::task::JoinSet<()>,
    /// Statuses in blocks below this were decided before the run began.
    pub(super) first_block: u64,
    /// When each router's link was first seen full, while it is.
    full_since: Vec<Option<Instant>>,
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
            let free = r.capacity();
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

/// A final status the committer (or the orderer) reported for a tx id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decided {
    /// The tx id.
    pub id: String,
    /// The status's name (`ORDERED` from an assembler).
    pub status: String,
    /// The block it was decided in.
    pub block: u64,
}

/// Opens a stream to every router and the status watcher, every channel sized by
/// `bound` txs in flight, after asking where the committer (or the assembler's ledger)
/// stands: statuses in blocks below it are not this run's.
pub(super) async fn links(endpoints: &Endpoints, bound: usize) -> crate::Result<Links> {
    let n = endpoints.routers.len();
    if n == 0 {
        return Err(crate::Error::InvalidParam {
            flag: "network",
            detail: "the network has no routers".into(),
        });
    }
    let (ack_tx, acks) = mpsc::channel::<Ack>(bound.saturating_mul(n).saturating_add(16));
    let mut routers = Vec::with_capacity(n);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, uri) in endpoints.routers.iter().enumerate() {
        let (tx, rx) = mpsc::channel(bound.saturating_add(16));
        routers.push(tx);
        tasks.spawn(router_link(i, channel(uri)?, rx, ack_tx.clone()));
    }
    let (ids, ids_rx) = mpsc::channel::<Vec<String>>(bound.saturating_add(16));
    let (ev_tx, events) = mpsc::channel::<Decided>(bound.saturating_add(16));
    let first_block = match &endpoints.sidecar {
        Some(uri) => {
            let channel = channel(uri)?;
            let first = committer_next_block(channel.clone()).await?;
            tasks.spawn(watch_sidecar(channel, ids_rx, ev_tx));
            first
        }
        None => {
            let channel = channel(&endpoints.assembler)?;
            let first = ledger_height(channel.clone()).await?;
            tasks.spawn(watch_assembler(channel, first, ids_rx, ev_tx));
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

/// One router's persistent Submit stream, reopened after a failure. Requests are
/// matched to answers by id (the tx index).
async fn router_link(
    router: usize,
    channel: tonic::transport::Channel,
    mut rx: mpsc::Receiver<(usize, Arc<Vec<u8>>)>,
    acks: mpsc::Sender<Ack>,
) {
    let fail = |tx: usize, reason: &str| Ack {
        tx,
        router,
        answer: Answer::Failed(reason.to_string()),
    };
    let mut outgoing: Option<(usize, Arc<Vec<u8>>)> = None;
    loop {
        let (req_tx, req_rx) = mpsc::channel::<pb::SubmitRequest>(256);
        let mut client = RouterClient::new(channel.clone());
        let opened =
            tokio::time::timeout(Duration::from_secs(5), client.submit(ReceiverStream::new(req_rx))).await;
        let mut responses = match opened {
            Ok(Ok(r)) => r.into_inner(),
            _ => {
                // Down: what arrives meanwhile is answered as failed, for a while.
                let until = tokio::time::Instant::now() + Duration::from_millis(500);
                if let Some((tx, _)) = outgoing.take() {
                    let _ = acks.send(fail(tx, "unavailable")).await;
                }
                while let Ok(Some((tx, _))) = tokio::time::timeout_at(until, rx.recv()).await {
                    let _ = acks.send(fail(tx, "unavailable")).await;
                }
                if rx.is_closed() && rx.is_empty() {
                    return;
                }
                continue;
            }
        };
        let mut pending: HashSet<usize> = HashSet::new();
        loop {
            tokio::select! {
                m = rx.recv(), if outgoing.is_none() => match m {
                    Some(m) => outgoing = Some(m),
                    None => return,
                },
                permit = req_tx.reserve(), if outgoing.is_some() => {
                    let (Ok(permit), Some((tx, env))) = (permit, outgoing.take()) else { break };
                    pending.insert(tx);
                    permit.send(pb::SubmitRequest { id: tx as u64, envelope: env.as_ref().clone() });
                }
                r = responses.message() => match r {
                    Ok(Some(resp)) => {
                        let tx = usize::try_from(resp.id).unwrap_or(usize::MAX);
                        if pending.remove(&tx) {
                            let answer = Answer::of_code(resp.code);
                            let _ = acks.send(Ack { tx, router, answer }).await;
                        }
                    }
                    _ => break,
                },
            }
        }
        for tx in pending {
            let _ = acks.send(fail(tx, "stream failed")).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The committer's notification stream: subscribes to every id sent, reopens after a
/// failure and subscribes again to the ids still unconfirmed.
pub(crate) async fn watch_sidecar(
    channel: tonic::transport::Channel,
    mut ids: mpsc::Receiver<Vec<String>>,
    events: mpsc::Sender<Decided>,
) {
    let mut waiting: HashSet<String> = HashSet::new();
    let mut outgoing: Vec<Vec<String>> = Vec::new();
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
        let mut all: Vec<String> = waiting.iter().cloned().collect();
        while !all.is_empty() {
            let rest = all.split_off(all.len().min(1000));
            outgoing.push(std::mem::replace(&mut all, rest));
        }
        loop {
            tokio::select! {
                m = ids.recv(), if outgoing.is_empty() => match m {
                    Some(batch) => {
                        waiting.extend(batch.iter().cloned());
                        outgoing.push(batch);
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
                        if waiting.remove(&st.tx_id) {
                            let name = Status::from_code(st.code)
                                .map_or_else(|_| format!("CODE_{}", st.code), |s| s.name().to_string());
                            let decided = Decided { id: st.tx_id, status: name, block: st.block };
                            if events.send(decided).await.is_err() {
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
/// id of ours that appears in a block is `ORDERED`.
async fn watch_assembler(
    channel: tonic::transport::Channel,
    first: u64,
    mut ids: mpsc::Receiver<Vec<String>>,
    events: mpsc::Sender<Decided>,
) {
    let mut waiting: HashSet<String> = HashSet::new();
    let mut next = first;
    loop {
        let request = pb::DeliverRequest {
            from: next,
            to: None,
            headers_only: false,
            to_end: false,
        };
        let mut stream = match clients::deliver::open(channel.clone(), request, 64 << 20).await {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        loop {
            tokio::select! {
                m = ids.recv() => match m {
                    Some(batch) => waiting.extend(batch),
                    None => return,
                },
                b = stream.message() => match b {
                    Ok(Some(b)) => {
                        // A tx's id is queued here before the tx goes to any router,
                        // so every id a block can hold is queued by now; a block read
                        // before them would pass them by for good.
                        while let Ok(batch) = ids.try_recv() {
                            waiting.extend(batch);
                        }
                        let block = b.header.as_ref().map_or(next, |h| h.number);
                        next = block.saturating_add(1);
                        for raw in &b.requests {
                            let Ok(env) = pb::Envelope::decode(raw.as_slice()) else { continue };
                            if waiting.remove(&env.tx_id) {
                                let decided = Decided { id: env.tx_id, status: "ORDERED".into(), block };
                                if events.send(decided).await.is_err() {
                                    return;
                                }
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
        let mut router = RouterClient::new(channel(&format!("http://{}", s.routers[0])).unwrap());
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
        let (ids_tx, ids_rx) = mpsc::channel(n + 1);
        for id in &ids {
            ids_tx.try_send(vec![id.clone()]).unwrap();
        }
        let (ev_tx, mut events) = mpsc::channel(n + 1);
        let assembler = channel(&format!("http://{}", s.assembler)).unwrap();
        let watcher = tokio::spawn(watch_assembler(assembler, 0, ids_rx, ev_tx));
        let mut confirmed = 0;
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(3), events.recv()).await {
            confirmed += 1;
        }
        watcher.abort();
        assert_eq!(confirmed, n);
    }
}
