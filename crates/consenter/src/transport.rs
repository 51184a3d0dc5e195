//! Outgoing side of the gRPC transport: one bounded drop-oldest queue and one sender
//! task per peer. The engine's `send` only encodes the message and queues it (it never
//! blocks the replica); the peer's task signs each envelope, streams it over a
//! long-lived `Exchange` call and reconnects with exponential backoff when the peer is
//! down. A dead peer's queue keeps the newest `capacity` messages and counts what it
//! drops: the protocol retransmits (heartbeats, state transfer), so losing old
//! messages is safe and memory stays bounded.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bft::shell::Transport;
use bft::{Message, ReplicaId};
use crypto::SigningKey;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{debug, info};
use wire::pb;
use wire::pb::bft_consensus_client::BftConsensusClient;

use crate::keys::{ClusterKeys, seal};

/// Largest encoded message the transport sends or accepts.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Transport counters (shared by the sending and the receiving side).
#[derive(Debug, Default)]
pub struct Stats {
    /// Envelopes received that verified and decoded.
    pub received: AtomicU64,
    /// Envelopes received and dropped: bad signature, wrong cluster or addressee,
    /// undecodable payload.
    pub rejected: AtomicU64,
    /// Outgoing messages dropped because a peer's queue was full.
    pub dropped_outgoing: AtomicU64,
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
}

/// A bounded queue that drops its oldest element when full.
pub struct DropOldest<T> {
    items: Mutex<VecDeque<T>>,
    ready: Notify,
    capacity: usize,
}

impl<T> DropOldest<T> {
    /// A queue holding at most `capacity ≥ 1` items.
    pub fn new(capacity: usize) -> DropOldest<T> {
        DropOldest {
            items: Mutex::new(VecDeque::with_capacity(capacity.min(1024))),
            ready: Notify::new(),
            capacity: capacity.max(1),
        }
    }

    /// Appends `item`; returns true iff an older item was dropped to make room.
    pub fn push(&self, item: T) -> bool {
        let dropped = {
            let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
            let dropped = items.len() >= self.capacity && items.pop_front().is_some();
            items.push_back(item);
            dropped
        };
        self.ready.notify_one();
        dropped
    }

    /// Takes the oldest item, waiting for one. Cancel safe: an item is removed only
    /// when the future completes.
    pub async fn pop(&self) -> T {
        loop {
            if let Some(item) = self.items.lock().unwrap_or_else(|e| e.into_inner()).pop_front() {
                return item;
            }
            self.ready.notified().await;
        }
    }

    /// Number of queued items.
    pub fn len(&self) -> usize {
        self.items.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True iff nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Settings of the outgoing side.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// This replica.
    pub me: ReplicaId,
    /// `host:port` of every replica (index = replica id).
    pub peers: Vec<String>,
    /// Messages kept per peer while it is slow or down.
    pub queue_capacity: usize,
    /// First reconnect delay; doubles per failed attempt.
    pub backoff_min: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
}

/// One peer's queue of encoded messages.
type PeerQueue = Arc<DropOldest<Arc<Vec<u8>>>>;

/// The engine's [`Transport`] over gRPC.
#[derive(Clone)]
pub struct GrpcTransport {
    me: ReplicaId,
    queues: Arc<Vec<Option<PeerQueue>>>,
    stats: Arc<Stats>,
}

impl GrpcTransport {
    /// Creates the queues and spawns one sender task per peer.
    pub fn spawn(
        cfg: TransportConfig,
        key: SigningKey,
        keys: ClusterKeys,
        stats: Arc<Stats>,
    ) -> (GrpcTransport, Vec<JoinHandle<()>>) {
        let key = Arc::new(key);
        let mut queues = Vec::new();
        let mut tasks = Vec::new();
        for (to, addr) in cfg.peers.iter().enumerate() {
            let to = to as ReplicaId;
            if to == cfg.me {
                queues.push(None);
                continue;
            }
            let queue = Arc::new(DropOldest::new(cfg.queue_capacity));
            queues.push(Some(queue.clone()));
            let link = PeerLink {
                me: cfg.me,
                to,
                addr: addr.clone(),
                key: key.clone(),
                keys: keys.clone(),
                queue,
                stats: stats.clone(),
                backoff_min: cfg.backoff_min,
                backoff_max: cfg.backoff_max,
            };
            tasks.push(tokio::spawn(link.run()));
        }
        (
            GrpcTransport {
                me: cfg.me,
                queues: Arc::new(queues),
                stats,
            },
            tasks,
        )
    }

    fn enqueue(&self, to: ReplicaId, payload: Arc<Vec<u8>>) {
        if let Some(Some(queue)) = self.queues.get(to as usize)
            && queue.push(payload)
        {
            Stats::bump(&self.stats.dropped_outgoing);
        }
    }
}

fn encode(msg: &Message) -> Arc<Vec<u8>> {
    Arc::new(prost::Message::encode_to_vec(&crate::codec::message_to_pb(msg)))
}

impl Transport for GrpcTransport {
    fn send(&self, to: ReplicaId, msg: Message) {
        if to != self.me {
            self.enqueue(to, encode(&msg));
        }
    }

    fn broadcast(&self, me: ReplicaId, msg: Message) {
        let payload = encode(&msg);
        for to in (0..self.n()).filter(|t| *t != me) {
            self.enqueue(to, payload.clone());
        }
    }

    fn n(&self) -> u32 {
        self.queues.len() as u32
    }
}

/// One peer's sender task.
struct PeerLink {
    me: ReplicaId,
    to: ReplicaId,
    addr: String,
    key: Arc<SigningKey>,
    keys: ClusterKeys,
    queue: PeerQueue,
    stats: Arc<Stats>,
    backoff_min: Duration,
    backoff_max: Duration,
}

impl PeerLink {
    async fn run(self) {
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
                    self.stream(client).await;
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
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(10))
            .connect()
            .await?;
        Ok(BftConsensusClient::new(channel).max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Streams queued messages until the call ends (peer gone or stream broken).
    async fn stream(&self, mut client: BftConsensusClient<tonic::transport::Channel>) {
        let (tx_stream, rx_stream) = mpsc::channel::<pb::BftEnvelope>(64);
        let mut call = tokio::spawn(async move { client.exchange(ReceiverStream::new(rx_stream)).await });
        loop {
            let payload = tokio::select! {
                p = self.queue.pop() => p,
                _ = &mut call => return,
            };
            let env = seal(&self.key, &self.keys, self.me, self.to, payload.as_ref().clone());
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
/// as rejected).
pub async fn send_envelopes(
    addr: &str,
    envelopes: Vec<pb::BftEnvelope>,
) -> Result<pb::BftExchangeSummary, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut client = BftConsensusClient::new(channel);
    let reply = client.exchange(tokio_stream::iter(envelopes)).await?;
    Ok(reply.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drop_oldest_keeps_the_newest_items() {
        let q = DropOldest::new(3);
        let dropped: Vec<bool> = (0..5).map(|i| q.push(i)).collect();
        assert_eq!(dropped, [false, false, false, true, true]);
        assert_eq!(q.len(), 3);
        assert_eq!([q.pop().await, q.pop().await, q.pop().await], [2, 3, 4]);
        assert!(q.is_empty());
    }
}
