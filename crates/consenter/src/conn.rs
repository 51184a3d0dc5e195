//! Incoming connections of the consenter's gRPC server, bounded: at most
//! `max_connections` are open at once (a connection over the bound is closed as soon
//! as it is accepted, and counted), and a connection that sends nothing for
//! `idle_timeout` is closed. The server's HTTP/2 keep-alive pings (see `node::serve`)
//! detect peers that vanished; a client answering them counts as active.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::warn;

/// Bounds of the incoming connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections open at once; more are closed at accept.
    pub max_connections: usize,
    /// A connection that sends nothing for this long is closed.
    pub idle_timeout: Duration,
}

/// Counters of the connection bound.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections closed at accept because `max_connections` were open.
    pub refused: AtomicU64,
    /// Connections closed because they were idle.
    pub idle_closed: AtomicU64,
}

/// The accepted connections of `listener`, bounded by `limits`.
pub fn incoming(
    listener: TcpListener,
    limits: ConnLimits,
    stats: Arc<ConnStats>,
) -> ReceiverStream<io::Result<LimitedConn>> {
    let (tx, rx) = mpsc::channel(16);
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    tokio::spawn(async move {
        loop {
            let (sock, addr) = match listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    // Transient (out of file descriptors, aborted handshake): keep serving.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = open.clone().try_acquire_owned() else {
                let refused = stats.refused.fetch_add(1, Ordering::Relaxed) + 1;
                if refused.is_power_of_two() {
                    warn!(%addr, refused, limit = limits.max_connections, "connection bound reached; closing new connections");
                }
                drop(sock);
                continue;
            };
            let _ = sock.set_nodelay(true);
            let conn = LimitedConn::new(sock, permit, limits.idle_timeout, stats.clone());
            if tx.send(Ok(conn)).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// One accepted connection: holds a share of the connection bound until it closes,
/// and fails its reads once it was idle for the idle timeout.
pub struct LimitedConn {
    inner: TcpStream,
    _open: OwnedSemaphorePermit,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    stats: Arc<ConnStats>,
}

impl LimitedConn {
    fn new(
        inner: TcpStream,
        open: OwnedSemaphorePermit,
        idle_timeout: Duration,
        stats: Arc<ConnStats>,
    ) -> LimitedConn {
        LimitedConn {
            inner,
            _open: open,
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            stats,
        }
    }
}

impl AsyncRead for LimitedConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let deadline = Instant::now() + self.idle_timeout;
                    self.idle.as_mut().reset(deadline);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.idle.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "idle connection closed",
                    )))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for LimitedConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl Connected for LimitedConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt as _;
    use tokio_stream::StreamExt as _;

    #[tokio::test]
    async fn connections_over_the_bound_are_closed_and_idle_ones_time_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(ConnStats::default());
        let limits = ConnLimits {
            max_connections: 2,
            idle_timeout: Duration::from_millis(300),
        };
        let mut accepted = incoming(listener, limits, stats.clone());
        let mut clients = Vec::new();
        for _ in 0..5 {
            clients.push(TcpStream::connect(addr).await.unwrap());
        }
        let mut a = accepted.next().await.unwrap().unwrap();
        let _b = accepted.next().await.unwrap().unwrap();
        // the three over the bound are closed by the server: their reads see EOF
        for c in &mut clients[2..] {
            let mut byte = [0u8; 1];
            let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut byte))
                .await
                .unwrap();
            assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        }
        assert_eq!(stats.refused.load(Ordering::Relaxed), 3);
        // an idle accepted connection fails its read after the idle timeout
        let mut buf = [0u8; 8];
        let r = tokio::time::timeout(Duration::from_secs(5), a.read(&mut buf))
            .await
            .unwrap();
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(stats.idle_closed.load(Ordering::Relaxed), 1);
        // closing a connection frees its place
        drop(a);
        let _c = TcpStream::connect(addr).await.unwrap();
        let third = tokio::time::timeout(Duration::from_secs(5), accepted.next())
            .await
            .unwrap();
        assert!(third.unwrap().is_ok());
    }
}
