//! Outgoing side of the gRPC transport: one bounded drop-oldest queue and one sender
//! task per peer. The engine's `send` only encodes the message and queues it (it never
//! blocks the replica); the peer's task signs each envelope (with its position in the
//! stream, see [`crate::keys::EnvelopeSeq`]), streams it over a long-lived `Exchange`
//! call and reconnects with exponential backoff when the peer is down.
//!
//! The queues ([`OutQueues`]) are bounded in messages per peer, bytes per peer and
//! bytes in total; over the total, the oldest message of the *largest* queue goes
//! first, so a slow or dead peer cannot take the budget of the others. A message
//! whose identical copy is still queued for the same peer is not queued again: the
//! engine retransmits its in-flight pre-prepare, votes and view change with every
//! heartbeat, and a slow link must not hold a copy per heartbeat. Payloads are
//! shared (`Arc`) between the peers of a broadcast. The protocol retransmits
//! (heartbeats, state transfer), so dropping old messages is safe.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bft::shell::Transport;
use bft::{Message, ReplicaId};
use crypto::SigningKey;
use sha2::{Digest as _, Sha256};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{debug, info};
use wire::pb;
use wire::pb::bft_consensus_client::BftConsensusClient;

use crate::keys::{ClusterKeys, EnvelopeSeq, frame_at, seal_at};

/// Largest encoded message the transport sends or accepts on a peer stream.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Transport counters (shared by the sending and the receiving side).
#[derive(Debug, Default)]
pub struct Stats {
    /// Envelopes received that verified and decoded.
    pub received: AtomicU64,
    /// Envelopes received and dropped: bad signature, wrong cluster or addressee,
    /// replayed or stale position, undecodable payload.
    pub rejected: AtomicU64,
    /// Outgoing messages dropped because a peer's queue or the total budget was full.
    pub dropped_outgoing: AtomicU64,
    /// Outgoing messages not queued because an identical copy was still queued.
    pub deduplicated: AtomicU64,
    /// Envelopes handed to a peer's stream.
    pub sent: AtomicU64,
}

impl Stats {
    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a received, verified envelope.
    pub fn bump_received(&self) {
        Stats::bump(&self.received);
    }

    /// Counts a rejected envelope.
    pub fn bump_rejected(&self) {
        Stats::bump(&self.rejected);
    }
}

/// Bounds of the outgoing queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Messages kept per peer.
    pub messages_per_peer: std::num::NonZeroUsize,
    /// Bytes kept per peer (a single larger message is still kept alone).
    pub bytes_per_peer: usize,
    /// Bytes kept over all peers.
    pub total_bytes: usize,
}

/// A queued payload and its content key.
struct Item {
    key: [u8; 32],
    payload: Arc<Vec<u8>>,
}

#[derive(Default)]
struct PeerQueue {
    items: VecDeque<Item>,
    bytes: usize,
    keys: HashMap<[u8; 32], u32>,
    ready: Arc<Notify>,
}

impl PeerQueue {
    fn pop(&mut self) -> Option<Item> {
        let item = self.items.pop_front()?;
        self.bytes = self.bytes.saturating_sub(item.payload.len());
        if let Some(c) = self.keys.get_mut(&item.key) {
            *c = c.saturating_sub(1);
            if *c == 0 {
                self.keys.remove(&item.key);
            }
        }
        Some(item)
    }
}

struct QueueState {
    peers: Vec<PeerQueue>,
    total: usize,
}

/// What [`OutQueues::push`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// False iff an identical payload was still queued for the peer.
    pub queued: bool,
    /// Older messages dropped to make room (from this or the largest queue).
    pub dropped: u64,
}

/// The outgoing queues of all peers: drop-oldest, bounded in messages and bytes per
/// peer and in bytes overall, de-duplicated per peer.
pub struct OutQueues {
    state: Mutex<QueueState>,
    limits: QueueLimits,
}

impl OutQueues {
    /// Queues for `n` peers.
    pub fn new(n: usize, limits: QueueLimits) -> OutQueues {
        OutQueues {
            state: Mutex::new(QueueState {
                peers: (0..n).map(|_| PeerQueue::default()).collect(),
                total: 0,
            }),
            limits,
        }
    }

    /// Adds queues up to `n` peers (a replica set that grew); never removes one.
    pub fn grow(&self, n: usize) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.peers.len() < n {
            st.peers.push(PeerQueue::default());
        }
    }

    /// Number of peers with a queue.
    pub fn peers(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).peers.len()
    }

    /// The content key of a payload.
    pub fn key(payload: &[u8]) -> [u8; 32] {
        Sha256::digest(payload).into()
    }

    /// Queues `payload` (with content key `key`) for peer `to`.
    pub fn push(&self, to: usize, key: [u8; 32], payload: Arc<Vec<u8>>) -> Pushed {
        let mut dropped = 0;
        let ready = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let Some(q) = st.peers.get_mut(to) else {
                return Pushed {
                    queued: false,
                    dropped,
                };
            };
            if q.keys.contains_key(&key) {
                return Pushed {
                    queued: false,
                    dropped,
                };
            }
            let len = payload.len();
            let mut freed = 0;
            while !q.items.is_empty()
                && (q.items.len() >= self.limits.messages_per_peer.get()
                    || q.bytes.saturating_add(len) > self.limits.bytes_per_peer)
            {
                freed += q.pop().map_or(0, |i| i.payload.len());
                dropped += 1;
            }
            st.total = st.total.saturating_sub(freed);
            while st.total.saturating_add(len) > self.limits.total_bytes {
                let Some(victim) = (0..st.peers.len())
                    .filter(|p| !st.peers[*p].items.is_empty())
                    .max_by_key(|p| st.peers[*p].bytes)
                else {
                    break;
                };
                let freed = st.peers[victim].pop().map_or(0, |i| i.payload.len());
                st.total = st.total.saturating_sub(freed);
                dropped += 1;
            }
            let q = &mut st.peers[to];
            q.bytes = q.bytes.saturating_add(len);
            *q.keys.entry(key).or_default() += 1;
            q.items.push_back(Item { key, payload });
            let ready = Arc::clone(&q.ready);
            st.total = st.total.saturating_add(len);
            ready
        };
        ready.notify_one();
        Pushed {
            queued: true,
            dropped,
        }
    }

    /// Takes the oldest payload for `to`, waiting for one. Cancel safe: an item is
    /// removed only when the future completes.
    pub async fn pop(&self, to: usize) -> Arc<Vec<u8>> {
        loop {
            let ready = {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(item) = st.peers.get_mut(to).and_then(PeerQueue::pop) {
                    st.total = st.total.saturating_sub(item.payload.len());
                    return item.payload;
                }
                st.peers.get(to).map(|q| Arc::clone(&q.ready))
            };
            match ready {
                Some(r) => r.notified().await,
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// Messages and bytes queued for `to`.
    pub fn queued(&self, to: usize) -> (usize, usize) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.peers.get(to).map_or((0, 0), |q| (q.items.len(), q.bytes))
    }

    /// Bytes queued over all peers.
    pub fn total_bytes(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

/// Settings of the outgoing side.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// This replica.
    pub me: ReplicaId,
    /// `host:port` of every replica (index = replica id).
    pub peers: Vec<String>,
    /// Bounds of the outgoing queues.
    pub limits: QueueLimits,
    /// This replica's boot epoch (the first half of every envelope position).
    pub epoch: u64,
    /// First reconnect delay; doubles per failed attempt.
    pub backoff_min: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// Whether envelopes carry the sender's signature: needed when links are plain
    /// TCP; over mutual TLS the receiver knows the sender from its certificate and an
    /// unsigned envelope saves a signature per message per peer (ADR 0017).
    pub sign_envelopes: bool,
}

/// The engine's [`Transport`] over gRPC. It grows with the replica set
/// ([`crate::peers::Peers`]): [`GrpcTransport::grow`] adds a queue and a link per new
/// replica, and broadcasts reach them from then on.
#[derive(Clone)]
pub struct GrpcTransport {
    me: ReplicaId,
    n: Arc<AtomicU32>,
    queues: Arc<OutQueues>,
    stats: Arc<Stats>,
    links: Arc<LinkParams>,
}

/// What every peer link shares.
struct LinkParams {
    key: Arc<SigningKey>,
    keys: ClusterKeys,
    backoff_min: Duration,
    backoff_max: Duration,
    epoch: u64,
    sign_envelopes: bool,
    /// Replicas a link was spawned for (index = replica id).
    spawned: Mutex<usize>,
}

impl GrpcTransport {
    /// Creates the queues and spawns one sender task per peer.
    pub fn spawn(
        cfg: TransportConfig,
        key: SigningKey,
        keys: ClusterKeys,
        stats: Arc<Stats>,
    ) -> (GrpcTransport, Vec<JoinHandle<()>>) {
        let transport = GrpcTransport {
            me: cfg.me,
            n: Arc::new(AtomicU32::new(0)),
            queues: Arc::new(OutQueues::new(0, cfg.limits)),
            stats,
            links: Arc::new(LinkParams {
                key: Arc::new(key),
                keys,
                backoff_min: cfg.backoff_min,
                backoff_max: cfg.backoff_max,
                epoch: cfg.epoch,
                sign_envelopes: cfg.sign_envelopes,
                spawned: Mutex::new(0),
            }),
        };
        let tasks = transport.grow(&cfg.peers);
        (transport, tasks)
    }

    /// Adds a queue and a sender task for each replica of `peers` (`host:port`, index =
    /// replica id) past the ones it has; the ones it has keep their links.
    pub fn grow(&self, peers: &[String]) -> Vec<JoinHandle<()>> {
        let mut spawned = self.links.spawned.lock().unwrap_or_else(|e| e.into_inner());
        let mut tasks = Vec::new();
        if peers.len() <= *spawned {
            return tasks;
        }
        self.queues.grow(peers.len());
        for (to, addr) in peers.iter().enumerate().skip(*spawned) {
            let Ok(to) = ReplicaId::try_from(to) else { break };
            if to == self.me {
                continue;
            }
            let link = PeerLink {
                me: self.me,
                to,
                addr: addr.clone(),
                key: self.links.key.clone(),
                keys: self.links.keys.clone(),
                queues: self.queues.clone(),
                stats: self.stats.clone(),
                backoff_min: self.links.backoff_min,
                backoff_max: self.links.backoff_max,
                epoch: self.links.epoch,
                sign_envelopes: self.links.sign_envelopes,
            };
            tasks.push(tokio::spawn(link.run()));
        }
        *spawned = peers.len();
        self.n
            .store(u32::try_from(peers.len()).unwrap_or(u32::MAX), Ordering::Release);
        tasks
    }

    fn enqueue(&self, to: ReplicaId, key: [u8; 32], payload: Arc<Vec<u8>>) {
        let pushed = self.queues.push(to as usize, key, payload);
        if !pushed.queued {
            Stats::bump(&self.stats.deduplicated);
        }
        self.stats
            .dropped_outgoing
            .fetch_add(pushed.dropped, Ordering::Relaxed);
    }
}

fn encode(msg: &Message) -> ([u8; 32], Arc<Vec<u8>>) {
    let payload = prost::Message::encode_to_vec(&crate::codec::message_to_pb(msg));
    (OutQueues::key(&payload), Arc::new(payload))
}

impl Transport for GrpcTransport {
    fn send(&self, to: ReplicaId, msg: Message) {
        if to != self.me {
            let (key, payload) = encode(&msg);
            self.enqueue(to, key, payload);
        }
    }

    fn broadcast(&self, me: ReplicaId, msg: Message) {
        let (key, payload) = encode(&msg);
        for to in (0..self.n()).filter(|t| *t != me) {
            self.enqueue(to, key, payload.clone());
        }
    }

    fn n(&self) -> u32 {
        self.n.load(Ordering::Acquire)
    }
}

/// One peer's sender task.
struct PeerLink {
    me: ReplicaId,
    to: ReplicaId,
    addr: String,
    key: Arc<SigningKey>,
    keys: ClusterKeys,
    queues: Arc<OutQueues>,
    stats: Arc<Stats>,
    backoff_min: Duration,
    backoff_max: Duration,
    epoch: u64,
    sign_envelopes: bool,
}

impl PeerLink {
    async fn run(self) {
        let mut counter = 0u64;
        let mut backoff = self.backoff_min;
        let mut was_connected = false;
        loop {
            match self.connect().await {
                Ok(client) => {
                    if !was_connected {
                        info!(peer = self.to, addr = %self.addr, "connected to peer");
                    }
                    was_connected = true;
                    backoff = self.backoff_min;
                    self.stream(client, &mut counter).await;
                }
                Err(e) => {
                    if was_connected {
                        info!(peer = self.to, error = %e, "peer unreachable; retrying with backoff");
                    }
                    was_connected = false;
                    debug!(peer = self.to, ?backoff, "connect failed");
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.backoff_max);
        }
    }

    async fn connect(
        &self,
    ) -> Result<BftConsensusClient<tonic::transport::Channel>, tonic::transport::Error> {
        let endpoint = wire::server::client_endpoint(format!("http://{}", self.addr))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(10));
        let channel = wire::server::connect(&endpoint).await?;
        Ok(BftConsensusClient::new(channel).max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Streams queued messages until the call ends (peer gone or stream broken). Every
    /// envelope gets the next position of this link (`counter` survives reconnects).
    async fn stream(&self, mut client: BftConsensusClient<tonic::transport::Channel>, counter: &mut u64) {
        // One envelope between the queue and the stream: a deeper buffer would hold
        // messages outside the queue's byte bounds, and copies of a retransmitted
        // message that the queue's de-duplication no longer sees.
        let (tx_stream, rx_stream) = mpsc::channel::<pb::BftEnvelope>(1);
        let mut call = tokio::spawn(async move { client.exchange(ReceiverStream::new(rx_stream)).await });
        loop {
            let payload = tokio::select! {
                p = self.queues.pop(self.to as usize) => p,
                _ = &mut call => return,
            };
            *counter = counter.saturating_add(1);
            let seq = EnvelopeSeq {
                epoch: self.epoch,
                counter: *counter,
            };
            let env = if self.sign_envelopes {
                seal_at(
                    &self.key,
                    &self.keys,
                    (self.me, self.to),
                    seq,
                    payload.as_ref().clone(),
                )
            } else {
                frame_at(&self.keys, (self.me, self.to), seq, payload.as_ref().clone())
            };
            tokio::select! {
                sent = tx_stream.send(env) => {
                    if sent.is_err() {
                        break;
                    }
                    Stats::bump(&self.stats.sent);
                }
                _ = &mut call => return,
            }
        }
        call.abort();
    }
}

/// Opens one `Exchange` stream to `addr`, sends `envelopes` and returns the
/// receiver's summary (diagnostics and tests: e.g. that forged envelopes are counted
/// as rejected). A receiver ends a stream at its first rejected envelope with an
/// error status carrying the summary; that summary is returned as well (use
/// [`exchange_status`] to see the status itself).
pub async fn send_envelopes(
    addr: &str,
    envelopes: Vec<pb::BftEnvelope>,
) -> Result<pb::BftExchangeSummary, tonic::Status> {
    let endpoint = wire::server::client_endpoint(format!("http://{addr}"))
        .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
    let channel = wire::server::connect(&endpoint)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut client = BftConsensusClient::new(channel);
    match client.exchange(tokio_stream::iter(envelopes)).await {
        Ok(reply) => Ok(reply.into_inner()),
        Err(status) => match <pb::BftExchangeSummary as prost::Message>::decode(status.details()) {
            Ok(summary) if !status.details().is_empty() => Ok(summary),
            _ => Err(status),
        },
    }
}

/// Opens one `Exchange` stream to `addr`, sends `envelopes` and returns the call's
/// result as the receiver answered it (OK with a summary, or the error status).
pub async fn exchange_status(
    addr: &str,
    envelopes: Vec<pb::BftEnvelope>,
) -> Result<pb::BftExchangeSummary, tonic::Status> {
    let endpoint = wire::server::client_endpoint(format!("http://{addr}"))
        .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
    let channel = wire::server::connect(&endpoint)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut client = BftConsensusClient::new(channel).max_encoding_message_size(MAX_MESSAGE_BYTES);
    Ok(client.exchange(tokio_stream::iter(envelopes)).await?.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(messages: usize, peer: usize, total: usize) -> QueueLimits {
        QueueLimits {
            messages_per_peer: std::num::NonZeroUsize::new(messages).unwrap(),
            bytes_per_peer: peer,
            total_bytes: total,
        }
    }

    fn push(q: &OutQueues, to: usize, bytes: Vec<u8>) -> Pushed {
        q.push(to, OutQueues::key(&bytes), Arc::new(bytes))
    }

    #[tokio::test]
    async fn queues_drop_the_oldest_by_count_and_by_bytes() {
        let q = OutQueues::new(2, limits(3, 100, 1000));
        let dropped: Vec<u64> = (0..5u8).map(|i| push(&q, 0, vec![i]).dropped).collect();
        assert_eq!(dropped, [0, 0, 0, 1, 1]);
        assert_eq!(q.queued(0), (3, 3));
        assert_eq!(*q.pop(0).await, vec![2]);
        // bytes: 60 + 60 > 100 drops the older one; a single message over the bound
        // still goes alone
        let q = OutQueues::new(2, limits(100, 100, 1000));
        push(&q, 0, vec![1; 60]);
        assert_eq!(push(&q, 0, vec![2; 60]).dropped, 1);
        assert_eq!(push(&q, 0, vec![3; 150]).dropped, 1);
        assert_eq!(q.queued(0), (1, 150));
    }

    #[tokio::test]
    async fn a_retransmit_is_not_queued_while_its_copy_is() {
        let q = OutQueues::new(2, limits(100, 1 << 20, 1 << 20));
        let big = vec![7u8; 4096];
        assert!(push(&q, 1, big.clone()).queued);
        // a heartbeat retransmits the same pre-prepare 50 times while the link is slow
        let again = (0..50).filter(|_| push(&q, 1, big.clone()).queued).count();
        assert_eq!(again, 0);
        assert_eq!(q.queued(1), (1, 4096));
        assert_eq!(*q.pop(1).await, big);
        assert!(push(&q, 1, big).queued, "once sent it may be sent again");
    }

    #[tokio::test]
    async fn a_dead_peer_cannot_take_the_budget_of_the_others() {
        let q = OutQueues::new(3, limits(1000, 600, 1000));
        // peer 1 is dead: its queue fills to its own bound
        for i in 0..20u8 {
            push(&q, 1, vec![i; 100]);
        }
        assert_eq!(q.queued(1), (6, 600));
        // peer 2 still gets room: over the total, the largest queue loses its oldest
        for i in 0..5u8 {
            push(&q, 2, vec![i; 100]);
        }
        assert_eq!(q.queued(2), (5, 500));
        assert!(q.total_bytes() <= 1000);
        assert_eq!(q.queued(1).1 + 500, q.total_bytes());
    }
}
