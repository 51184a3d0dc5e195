//! The connection-level limits of every fabrx gRPC server: a bound on open connections,
//! an idle timeout, and HTTP/2 stream, window and header limits (`docs/limits.md`).
//!
//! [`incoming`] accepts from a listener and hands tonic connections that close themselves
//! when no byte has moved in either direction for [`ServerLimits::idle_timeout`]. When
//! [`ServerLimits::max_connections`] are open, a new connection evicts an open one:
//! first one that never sent a byte, else the one idle the longest, provided it has been
//! idle for at least [`ServerLimits::evict_after`] (otherwise the new connection is closed
//! at once). Idle connections therefore cannot lock honest clients out, and an honest
//! client that keeps a connection open while idle sends HTTP/2 keepalive pings (every
//! fabrx client does, see [`client_endpoint`]).

use futures::task::AtomicWaker;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::{debug, warn};

/// Connection-level limits of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// A connection with no traffic for this long is closed.
    pub idle_timeout: Duration,
    /// At the connection bound, a connection idle this long may be evicted for a new one
    /// (zero: the best candidate is always evicted).
    pub evict_after: Duration,
    /// Most concurrent HTTP/2 streams (calls) per connection.
    pub max_concurrent_streams: u32,
    /// HTTP/2 flow-control window per stream: the most bytes a peer may send on a stream
    /// that the service is not reading.
    pub stream_window: u32,
    /// HTTP/2 flow-control window per connection.
    pub connection_window: u32,
    /// Largest HTTP/2 header list.
    pub max_header_list_bytes: u32,
    /// Most streams a peer may reset before they are accepted (rapid-reset defence).
    pub max_pending_reset_streams: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 256,
            idle_timeout: Duration::from_secs(120),
            evict_after: Duration::ZERO,
            max_concurrent_streams: 64,
            stream_window: 1 << 20,
            connection_window: 2 << 20,
            max_header_list_bytes: 16 << 10,
            max_pending_reset_streams: 32,
        }
    }
}

/// Interval of the HTTP/2 keepalive pings fabrx clients send (well under the servers'
/// idle timeout).
pub const CLIENT_KEEPALIVE: Duration = Duration::from_secs(30);

/// A server builder with the authorization layer of [`crate::tls`].
pub type Builder = tonic::transport::Server<tower_layer::Stack<crate::tls::AuthLayer, tower_layer::Identity>>;

/// A tonic server builder with `limits` applied and the authorization of every call by
/// the caller's certificate ([`crate::tls`]). TLS itself is done by the connections it
/// serves: serve it [`crate::tls::accept`]ed connections (with TLS installed, a
/// connection that is not one has no client certificate and every call on it is refused).
pub fn builder(limits: &ServerLimits) -> Builder {
    tonic::transport::Server::builder()
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_stream_window_size(limits.stream_window)
        .initial_connection_window_size(limits.connection_window)
        .http2_max_header_list_size(limits.max_header_list_bytes)
        .http2_max_pending_accept_reset_streams(Some(limits.max_pending_reset_streams))
        .http2_keepalive_interval(None)
        .layer(crate::tls::AuthLayer::default())
}

/// An endpoint for `uri` with the settings every fabrx client uses: keepalive pings while
/// idle (so servers do not close the connection as idle) and TCP_NODELAY. Make its
/// channel with [`connect`] or [`connect_lazy`], which run TLS when the process
/// installed an identity.
pub fn client_endpoint(uri: String) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    Ok(tonic::transport::Endpoint::from_shared(crate::tls::uri(uri))?
        .http2_keep_alive_interval(CLIENT_KEEPALIVE)
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true)
        .tcp_nodelay(true))
}

/// A channel to `endpoint`, connected now, over the process's TLS when installed
/// ([`crate::tls::Connector`]: each connection presents the identity in force when it
/// is made).
pub async fn connect(
    endpoint: &tonic::transport::Endpoint,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    endpoint.connect_with_connector(crate::tls::Connector).await
}

/// [`connect`], connecting at the first call (and reconnecting as needed).
pub fn connect_lazy(endpoint: &tonic::transport::Endpoint) -> tonic::transport::Channel {
    endpoint.connect_with_connector_lazy(crate::tls::Connector)
}

/// Counters of a server's connections.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections closed at once because the bound was reached and none could be evicted.
    pub refused: AtomicU64,
    /// Idle connections evicted for a new one.
    pub evicted: AtomicU64,
    /// Connections closed by the idle timeout.
    pub timed_out: AtomicU64,
}

/// The accepted connections of one listener, for `serve_with_incoming`: TLS connections
/// when the process installed an identity ([`crate::tls::accept`]).
pub type Incoming = crate::tls::Accepted<LimitedConn>;

/// Accepts connections from `listener` under `limits`. The accept task ends when the
/// returned stream is dropped.
pub fn incoming(listener: TcpListener, limits: &ServerLimits) -> (Incoming, Arc<ConnStats>) {
    let (incoming, stats, _) = incoming_closable(listener, limits);
    (incoming, stats)
}

/// The open connections of one listener, which its owner may close all at once (a node
/// that stops: long-lived streams end with their connection).
#[derive(Clone)]
pub struct Connections {
    table: Arc<Table>,
}

impl Connections {
    /// Closes every open connection: reads see the end of the stream, writes fail.
    pub fn close_all(&self) {
        for slot in self.table.lock().values() {
            slot.close();
        }
    }

    /// Connections accepted and not yet dropped.
    pub fn open(&self) -> usize {
        self.table.lock().len()
    }
}

/// [`incoming`], with a handle on its open connections.
pub fn incoming_closable(
    listener: TcpListener,
    limits: &ServerLimits,
) -> (Incoming, Arc<ConnStats>, Connections) {
    let table = Arc::new(Table {
        slots: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(0),
        epoch: Instant::now(),
        stats: Arc::new(ConnStats::default()),
    });
    let stats = table.stats.clone();
    let connections = Connections { table: table.clone() };
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(accept_loop(listener, *limits, table, tx));
    (crate::tls::accept(ReceiverStream::new(rx)), stats, connections)
}

async fn accept_loop(
    listener: TcpListener,
    limits: ServerLimits,
    table: Arc<Table>,
    tx: mpsc::Sender<io::Result<LimitedConn>>,
) {
    let sweep_every = (limits.idle_timeout / 4).max(Duration::from_millis(20));
    let mut sweep = tokio::time::interval(sweep_every);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tx.closed() => return,
            _ = sweep.tick() => table.close_idle(limits.idle_timeout),
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Some(conn) = table.admit(stream, peer, &limits) else { continue };
                if tx.send(Ok(conn)).await.is_err() {
                    return;
                }
            }
        }
    }
}

struct Slot {
    last_active_ms: AtomicU64,
    /// Whether the peer ever sent a byte.
    spoke: AtomicBool,
    closed: AtomicBool,
    waker: AtomicWaker,
}

impl Slot {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waker.wake();
    }
}

struct Table {
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    next_id: AtomicU64,
    epoch: Instant,
    stats: Arc<ConnStats>,
}

impl Table {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a new connection, evicting the longest-idle one at the bound.
    fn admit(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        limits: &ServerLimits,
    ) -> Option<LimitedConn> {
        let now = self.now_ms();
        let mut slots = self.lock();
        if slots.len() >= limits.max_connections {
            let evict_ms = u64::try_from(limits.evict_after.as_millis()).unwrap_or(u64::MAX);
            // Silent connections first (never sent a byte), then the longest idle.
            let oldest = slots
                .iter()
                .map(|(id, s)| {
                    let spoke = s.spoke.load(Ordering::Relaxed);
                    (*id, spoke, s.last_active_ms.load(Ordering::Relaxed))
                })
                .min_by_key(|(_, spoke, t)| (*spoke, *t))
                .filter(|(_, _, t)| now.saturating_sub(*t) >= evict_ms);
            match oldest.and_then(|(id, _, _)| slots.remove(&id)) {
                Some(victim) => {
                    victim.close();
                    self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                    debug!(%peer, "connection bound reached: evicted the longest-idle connection");
                }
                None => {
                    self.stats.refused.fetch_add(1, Ordering::Relaxed);
                    warn!(%peer, max = limits.max_connections, "connection bound reached: refused");
                    return None;
                }
            }
        }
        let _ = stream.set_nodelay(true);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            last_active_ms: AtomicU64::new(now),
            spoke: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        slots.insert(id, slot.clone());
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        Some(LimitedConn {
            io: stream,
            slot,
            id,
            table: self.clone(),
        })
    }

    fn close_idle(&self, idle_timeout: Duration) {
        let now = self.now_ms();
        let limit = u64::try_from(idle_timeout.as_millis()).unwrap_or(u64::MAX);
        let mut slots = self.lock();
        slots.retain(|_, s| {
            let idle = now.saturating_sub(s.last_active_ms.load(Ordering::Relaxed)) >= limit;
            if idle {
                s.close();
                self.stats.timed_out.fetch_add(1, Ordering::Relaxed);
            }
            !idle
        });
    }
}

/// An accepted TCP connection that records its traffic and can be closed from outside.
pub struct LimitedConn {
    io: TcpStream,
    slot: Arc<Slot>,
    id: u64,
    table: Arc<Table>,
}

impl LimitedConn {
    fn touch(&self) {
        self.slot
            .last_active_ms
            .store(self.table.now_ms(), Ordering::Relaxed);
    }

    fn closed(&self) -> bool {
        self.slot.closed.load(Ordering::Acquire)
    }
}

impl Drop for LimitedConn {
    fn drop(&mut self) {
        self.table.lock().remove(&self.id);
    }
}

impl AsyncRead for LimitedConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.slot.waker.register(cx.waker());
        if self.closed() {
            // End of stream: the server closes the connection.
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
            self.slot.spoke.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl AsyncWrite for LimitedConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if self.closed() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection closed as idle",
            )));
        }
        let r = Pin::new(&mut self.io).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Connected for LimitedConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.io.local_addr().ok(),
            remote_addr: self.io.peer_addr().ok(),
        }
    }
}
