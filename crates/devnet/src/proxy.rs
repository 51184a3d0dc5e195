//! The latency proxy of `fabrx latency-proxy` (docs/benchmarks.md "Multi-region
//! (emulated on one machine)"): a TCP forwarder that adds a fixed one-way delay to the
//! bytes of every connection, in each direction, so that regions can be emulated on one
//! machine without `tc netem`.
//!
//! Each [`Route`] listens on its address and forwards every accepted connection to its
//! target. Per connection and direction a [`DelayLine`] holds the bytes read: each chunk
//! is written out at its arrival + the delay, in arrival order. The line is bounded
//! ([`Limits::max_buffer_bytes`]): when it is full the proxy stops reading that side, so
//! TCP flow control slows the sender (back-pressure instead of a growing queue).
//! Connections are bounded too ([`Limits::max_connections`] over all routes: more wait to
//! be accepted) and closed after [`Limits::idle_timeout`] without a byte either way. The
//! bytes are not looked at: TLS passes through untouched.
//!
//! Not modelled: bandwidth limits, loss, jitter, and the TCP handshake's round trip (a
//! client's connect completes at once; its bytes are delayed like all others).

use crate::{Error, Result};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

/// Bytes read from a socket at once.
const READ_CHUNK: usize = 64 * 1024;
/// How long connecting to a route's target may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One `--route`: where to listen and where to forward.
#[derive(Clone, Debug)]
pub struct Route {
    /// The address the proxy listens on.
    pub listen: SocketAddr,
    /// The `host:port` each accepted connection is forwarded to.
    pub target: String,
}

/// Parses a route `LISTEN=TARGET`: LISTEN an `ip:port`, TARGET a `host:port`.
pub fn parse_route(text: &str) -> std::result::Result<Route, String> {
    let (listen, target) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: a route is LISTEN=TARGET"))?;
    let listen: SocketAddr = listen
        .parse()
        .map_err(|e| format!("{listen:?}: the listen address must be ip:port ({e})"))?;
    let port_ok = target
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if !port_ok {
        return Err(format!("{target:?}: the target must be host:port"));
    }
    Ok(Route {
        listen,
        target: target.to_owned(),
    })
}

/// One direction of a connection: the chunks read and not yet written, in arrival order,
/// each due at its arrival + the delay. At most `capacity` bytes are held. Pure: time is
/// an input.
#[derive(Debug)]
pub struct DelayLine {
    delay: Duration,
    capacity: usize,
    held: usize,
    chunks: VecDeque<(Instant, Vec<u8>)>,
}

impl DelayLine {
    /// An empty line that delays by `delay` and holds at most `capacity` bytes.
    pub fn new(delay: Duration, capacity: NonZeroUsize) -> DelayLine {
        DelayLine {
            delay,
            capacity: capacity.get(),
            held: 0,
            chunks: VecDeque::new(),
        }
    }

    /// Bytes that may still be pushed.
    pub fn room(&self) -> usize {
        self.capacity - self.held
    }

    /// A chunk read at `now`, due at `now` + the delay. A chunk larger than
    /// [`room`](Self::room) is refused (returned): the caller reads at most that much.
    pub fn push(&mut self, now: Instant, chunk: Vec<u8>) -> std::result::Result<(), Vec<u8>> {
        if chunk.len() > self.room() {
            return Err(chunk);
        }
        if !chunk.is_empty() {
            self.held += chunk.len();
            self.chunks.push_back((now + self.delay, chunk));
        }
        Ok(())
    }

    /// When the oldest chunk is due (`None`: nothing held). Arrivals are monotonic and
    /// the delay fixed, so the oldest chunk is also the first due.
    pub fn next_due(&self) -> Option<Instant> {
        self.chunks.front().map(|(due, _)| *due)
    }

    /// The bytes of every chunk due at `now`, in order, as one buffer (empty: none due).
    pub fn pop_due(&mut self, now: Instant) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some((due, _)) = self.chunks.front() {
            if *due > now {
                break;
            }
            if let Some((_, chunk)) = self.chunks.pop_front() {
                self.held -= chunk.len();
                if out.is_empty() {
                    out = chunk;
                } else {
                    out.extend_from_slice(&chunk);
                }
            }
        }
        out
    }
}

/// The limits every connection runs under.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// One-way delay added to the bytes of each direction.
    pub delay: Duration,
    /// Bytes held per connection and direction; reading that side stops while full.
    pub max_buffer_bytes: NonZeroUsize,
    /// A connection without a byte in either direction this long is closed.
    pub idle_timeout: Duration,
}

/// What the routes of one process share: the connection permits and the totals it
/// reports when it stops.
struct Shared {
    permits: Arc<Semaphore>,
    connections: AtomicU64,
    bytes: AtomicU64,
}

/// The last time a byte moved on a connection, in ms since the connection began.
struct Activity {
    began: tokio::time::Instant,
    last_ms: AtomicU64,
    shared: Arc<Shared>,
}

impl Activity {
    fn new(shared: Arc<Shared>) -> Activity {
        Activity {
            began: tokio::time::Instant::now(),
            last_ms: AtomicU64::new(0),
            shared,
        }
    }

    /// `bytes` moved (read or written) now.
    fn touch(&self, bytes: usize) {
        let ms = u64::try_from(self.began.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
        self.shared.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn last(&self) -> tokio::time::Instant {
        self.began + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Returns once no byte has moved for `timeout`.
    async fn idle(&self, timeout: Duration) {
        loop {
            let deadline = self.last() + timeout;
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// Moves the bytes of one direction through its delay line until `from` ends and the
/// line is empty (then half-closes `to`), or an error. Returns the bytes moved.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut line: DelayLine,
    activity: &Activity,
) -> std::io::Result<u64> {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut reading = true;
    let mut moved = 0u64;
    loop {
        let due = line.next_due();
        if !reading && due.is_none() {
            to.shutdown().await?;
            return Ok(moved);
        }
        let room = line.room().min(buf.len());
        let wake = tokio::time::Instant::from_std(due.unwrap_or_else(Instant::now));
        tokio::select! {
            read = from.read(&mut buf[..room]), if reading && room > 0 => {
                let n = read?;
                if n == 0 {
                    reading = false;
                } else {
                    // At most `room` bytes were read, so the line takes them.
                    let _ = line.push(Instant::now(), buf[..n].to_vec());
                    activity.touch(0);
                }
            }
            () = tokio::time::sleep_until(wake), if due.is_some() => {
                let bytes = line.pop_due(Instant::now());
                if !bytes.is_empty() {
                    to.write_all(&bytes).await?;
                    moved += bytes.len() as u64;
                    activity.touch(bytes.len());
                }
            }
            else => return Ok(moved),
        }
    }
}

/// Forwards one accepted connection to `target` until both directions end, one fails,
/// or it is idle for the idle timeout.
async fn relay(
    client: TcpStream,
    target: &str,
    limits: Limits,
    shared: Arc<Shared>,
) -> std::result::Result<(u64, u64), String> {
    let server = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target))
        .await
        .map_err(|_| format!("connecting to {target}: timed out"))?
        .map_err(|e| format!("connecting to {target}: {e}"))?;
    client.set_nodelay(true).map_err(|e| e.to_string())?;
    server.set_nodelay(true).map_err(|e| e.to_string())?;
    let (client_rx, client_tx) = client.into_split();
    let (server_rx, server_tx) = server.into_split();
    let line = || DelayLine::new(limits.delay, limits.max_buffer_bytes);
    let activity = Activity::new(shared);
    let both = async {
        tokio::try_join!(
            pump(client_rx, server_tx, line(), &activity),
            pump(server_rx, client_tx, line(), &activity),
        )
    };
    tokio::select! {
        moved = both => moved.map_err(|e| e.to_string()),
        () = activity.idle(limits.idle_timeout) => Err(format!("idle for {:?}: closed", limits.idle_timeout)),
    }
}

/// Accepts connections on one route while a connection permit is free; each is relayed
/// by its own task, which holds its permit until the connection ends.
async fn serve(listener: TcpListener, target: String, limits: Limits, shared: Arc<Shared>) {
    loop {
        let Ok(permit) = shared.permits.clone().acquire_owned().await else {
            return;
        };
        let (client, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!(%target, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        shared.connections.fetch_add(1, Ordering::Relaxed);
        let target = target.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match relay(client, &target, limits, shared).await {
                Ok((up, down)) => debug!(%peer, %target, up, down, "connection closed"),
                Err(e) => debug!(%peer, %target, error = %e, "connection ended"),
            }
        });
    }
}

/// A running proxy.
pub struct Proxy {
    /// Each route's bound address (a port 0 resolved) and target, in route order.
    pub routes: Vec<(SocketAddr, String)>,
    shared: Arc<Shared>,
    servers: tokio::task::JoinSet<()>,
}

impl Proxy {
    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Bytes forwarded so far (both directions).
    pub fn bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::Relaxed)
    }

    /// Stops accepting and forwarding.
    pub fn stop(mut self) {
        self.servers.abort_all();
    }
}

/// Binds every route and serves them until [`Proxy::stop`]. Needs a tokio runtime.
pub async fn spawn(routes: &[Route], limits: Limits, max_connections: NonZeroUsize) -> Result<Proxy> {
    let mut bound = Vec::with_capacity(routes.len());
    for route in routes {
        let listener = TcpListener::bind(route.listen).await.map_err(|e| Error::Node {
            name: "latency proxy".into(),
            reason: format!("listening on {}: {e}", route.listen),
        })?;
        let addr = listener.local_addr().map_err(|e| Error::Node {
            name: "latency proxy".into(),
            reason: format!("listening on {}: {e}", route.listen),
        })?;
        bound.push((addr, listener, route.target.clone()));
    }
    let shared = Arc::new(Shared {
        permits: Arc::new(Semaphore::new(max_connections.get())),
        connections: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    });
    let routes = bound
        .iter()
        .map(|(addr, _, target)| (*addr, target.clone()))
        .collect();
    let mut servers = tokio::task::JoinSet::new();
    for (_, listener, target) in bound {
        servers.spawn(serve(listener, target, limits, shared.clone()));
    }
    info!(routes = servers.len(), delay = ?limits.delay, "latency proxy listening");
    Ok(Proxy {
        routes,
        shared,
        servers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(delay_ms: u64, capacity: usize) -> DelayLine {
        DelayLine::new(
            Duration::from_millis(delay_ms),
            NonZeroUsize::new(capacity).unwrap(),
        )
    }

    /// A step: at `at` ms, push `push` (accepted or refused), then pop what is due; then
    /// the bytes popped, the next due time (ms) and the bytes held (capacity − room).
    type Step = (u64, &'static [u8], bool, &'static [u8], Option<u64>, usize);

    #[test]
    fn chunks_leave_in_order_at_arrival_plus_delay_within_capacity() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut l = line(20, 8);
        let steps: [Step; 7] = [
            (0, b"abc", true, b"", Some(20), 3),
            (5, b"de", true, b"", Some(20), 5),
            // Beyond 8 bytes: refused, nothing changes.
            (6, b"fghi", false, b"", Some(20), 5),
            (19, b"", true, b"", Some(20), 5),
            (20, b"", true, b"abc", Some(25), 2),
            (21, b"fgh", true, b"", Some(25), 5),
            // Late: both due chunks leave together, in order.
            (60, b"", true, b"defgh", None, 0),
        ];
        for (i, (at, push, accepted, popped, next_due, held)) in steps.into_iter().enumerate() {
            assert_eq!(l.push(ms(at), push.to_vec()).is_ok(), accepted, "step {i}");
            assert_eq!(l.pop_due(ms(at)), popped.to_vec(), "step {i}");
            assert_eq!(l.next_due(), next_due.map(ms), "step {i}");
            assert_eq!(l.room(), 8 - held, "step {i}");
        }
    }

    #[test]
    fn zero_delay_releases_at_once() {
        let t0 = Instant::now();
        let mut l = line(0, 4);
        l.push(t0, b"xy".to_vec()).unwrap();
        assert_eq!(l.next_due(), Some(t0));
        assert_eq!(l.pop_due(t0), b"xy".to_vec());
        assert_eq!(l.room(), 4);
    }

    #[test]
    fn routes_parse_and_bad_ones_are_refused() {
        let r = parse_route("127.0.0.1:7000=node.example:7050").unwrap();
        assert_eq!(r.listen, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(r.target, "node.example:7050");
        for bad in [
            "127.0.0.1:7000",
            "x:1=127.0.0.1:2",
            "127.0.0.1:1=127.0.0.1",
            "127.0.0.1:1=:5",
            "127.0.0.1:1=h:0",
        ] {
            assert!(parse_route(bad).is_err(), "{bad}");
        }
    }
}
