//! A minimal HTTP/1.1 endpoint: `/metrics` in Prometheus text format, and optionally
//! a few control routes (the load generator's `/rate`). Bounded like every fabrx
//! server: at most [`MAX_CONNECTIONS`] connections at once (more are closed at once),
//! a request head of at most [`MAX_HEAD`] bytes and a body of at most [`MAX_BODY`],
//! [`IDLE`] to send them; one request per connection.

use crate::{Error, Registry};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::info;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Bytes of a request line and headers.
pub const MAX_HEAD: usize = 4096;
/// Bytes of a request body.
pub const MAX_BODY: usize = 1024;
/// Time a client has to send its request.
pub const IDLE: Duration = Duration::from_secs(5);

/// A request as a route sees it.
#[derive(Debug)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The query string (after `?`), or empty.
    pub query: String,
    /// The body.
    pub body: Vec<u8>,
}

/// Answers a request other than `GET /metrics`: `Some((status, text))`, or `None` to
/// serve the metrics.
pub type Routes = Arc<dyn Fn(&Request) -> Option<(u16, String)> + Send + Sync>;

/// Serves `registry` on `addr` until the process exits.
pub async fn serve(addr: &str, registry: Registry) -> Result<(), Error> {
    serve_with(addr, registry, None).await
}

/// Serves `registry`, and `routes` first when given, on `addr` until the process exits.
pub async fn serve_with(addr: &str, registry: Registry, routes: Option<Routes>) -> Result<(), Error> {
    let listener = TcpListener::bind(addr).await.map_err(|source| Error::Listen {
        addr: addr.to_owned(),
        source,
    })?;
    info!(%addr, "metrics listening");
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            // Over the bound: the connection is dropped (closed) at once.
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                continue;
            };
            let registry = registry.clone();
            let routes = routes.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let _ = tokio::time::timeout(IDLE, answer(sock, &registry, routes.as_ref())).await;
            });
        }
    });
    Ok(())
}

async fn answer(mut sock: TcpStream, registry: &Registry, routes: Option<&Routes>) {
    let (status, content_type, body) = match read_request(&mut sock).await {
        Err(why) => (400, "text/plain", format!("{why}\n").into_bytes()),
        Ok(req) => match routes.and_then(|r| r(&req)) {
            Some((status, text)) => (status, "text/plain", text.into_bytes()),
            None => (200, "text/plain; version=0.0.4", registry.text().into_bytes()),
        },
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        _ => "Status",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(&body).await;
    let _ = sock.shutdown().await;
}

/// Reads one request within the size bounds.
async fn read_request(sock: &mut TcpStream) -> Result<Request, &'static str> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err("request head too large");
        }
        let n = sock.read(&mut chunk).await.map_err(|_| "read failed")?;
        if n == 0 {
            return Err("connection closed before the request ended");
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let mut body = buf.split_off(head_end + 4);
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| "request head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_string();
    let target = first.next().ok_or("no request target")?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut length = 0usize;
    for line in lines {
        if let Some((name, value)) = line.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().map_err(|_| "bad content-length")?;
        }
    }
    if length > MAX_BODY {
        return Err("request body too large");
    }
    while body.len() < length {
        let n = sock.read(&mut chunk).await.map_err(|_| "read failed")?;
        if n == 0 {
            return Err("connection closed before the body ended");
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Ok(Request {
        method,
        path: path.to_string(),
        query: query.to_string(),
        body,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
