//! The client side of fabrx's TLS (ADR 0019): every channel dials through [`Connector`],
//! which presents the identity in force when the connection is made, and falls back to
//! the previous one while a peer has not learned the new one.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::{HANDSHAKE_TIMEOUT, SERVER_NAME};

/// A client connection: TLS when the process installed an identity, else plain TCP.
pub enum ClientConn {
    /// Plain TCP (no identity installed).
    Plain(TcpStream),
    /// TLS, presenting the identity in force when it was made (or the previous one, when
    /// the server refused that).
    Tls(Box<ClientTls>),
}

/// A client TLS stream and the first bytes the server sent, read to learn that it
/// accepted the certificate, which the stream gives first.
pub struct ClientTls {
    stream: tokio_rustls::client::TlsStream<TcpStream>,
    first: Vec<u8>,
    at: usize,
}

impl AsyncRead for ClientConn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(io) => Pin::new(io).poll_read(cx, buf),
            ClientConn::Tls(tls) => {
                if tls.at < tls.first.len() {
                    let rest = tls.first.get(tls.at..).unwrap_or_default();
                    let n = rest.len().min(buf.remaining());
                    buf.put_slice(rest.get(..n).unwrap_or_default());
                    tls.at += n;
                    return Poll::Ready(Ok(()));
                }
                Pin::new(&mut tls.stream).poll_read(cx, buf)
            }
        }
    }
}

impl AsyncWrite for ClientConn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientConn::Plain(io) => Pin::new(io).poll_write(cx, data),
            ClientConn::Tls(tls) => Pin::new(&mut tls.stream).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(io) => Pin::new(io).poll_flush(cx),
            ClientConn::Tls(tls) => Pin::new(&mut tls.stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(io) => Pin::new(io).poll_shutdown(cx),
            ClientConn::Tls(tls) => Pin::new(&mut tls.stream).poll_shutdown(cx),
        }
    }
}

/// The connector of every fabrx client channel: dials the URI's host and port (TCP_NODELAY)
/// and, with an identity installed, runs the TLS handshake presenting the identity in
/// force, trusting only the network CA and checking the name [`SERVER_NAME`].
///
/// While the node holds a previous certificate (between a config update that adds its
/// next certificate and the one that removes the old), it waits for the server's first
/// bytes (an HTTP/2 server speaks first): a server that has not learned the new
/// certificate yet refuses the handshake, and the connection is made again with the
/// previous one, so nothing is refused while the nodes switch one after the other.
#[derive(Debug, Clone, Copy, Default)]
pub struct Connector;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Dials `host:port` and runs the client handshake with `config`; with `confirm`, also
/// waits for the server's first bytes (a refused certificate is then an error).
async fn dial(
    host: &str,
    port: u16,
    config: Arc<rustls::ClientConfig>,
    confirm: bool,
) -> io::Result<ClientConn> {
    use tokio::io::AsyncReadExt as _;
    let tcp = TcpStream::connect((host, port)).await?;
    tcp.set_nodelay(true)?;
    let name =
        ServerName::try_from(SERVER_NAME).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await?;
    let mut first = Vec::new();
    if confirm {
        let mut buf = vec![0u8; 1024];
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.read(&mut buf)).await {
            Ok(Ok(0)) => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    "the server closed the connection after the handshake",
                ));
            }
            Ok(Ok(n)) => first.extend_from_slice(buf.get(..n).unwrap_or_default()),
            Ok(Err(e)) => return Err(e),
            // A slow server: the channel finds out on its own.
            Err(_) => {}
        }
    }
    Ok(ClientConn::Tls(Box::new(ClientTls { stream, first, at: 0 })))
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = hyper_util::rt::TokioIo<ClientConn>;
    type Error = io::Error;
    type Future = BoxFuture<io::Result<Self::Response>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no host in {uri}")))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().unwrap_or(80);
            let Some(live) = super::installed() else {
                let tcp = TcpStream::connect((host.as_str(), port)).await?;
                tcp.set_nodelay(true)?;
                return Ok(hyper_util::rt::TokioIo::new(ClientConn::Plain(tcp)));
            };
            let fallback = live.previous().is_some();
            let conn = match dial(&host, port, Arc::clone(&live.client), fallback).await {
                Ok(conn) => conn,
                Err(e) if fallback => {
                    tracing::debug!(error = %e, %uri, "the server refused this node's new certificate: its previous one is presented");
                    dial(&host, port, Arc::clone(&live.previous_client), false).await?
                }
                Err(e) => return Err(e),
            };
            Ok(hyper_util::rt::TokioIo::new(conn))
        })
    }
}
