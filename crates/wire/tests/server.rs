#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Connection limits of `wire::server`: idle connections cannot lock honest clients out
//! (before this, 20,000 idle connections made a replica stop answering until they were
//! released), idle connections are closed, and a message over its type's limit is refused
//! with `RESOURCE_EXHAUSTED` by the codec every service uses.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};
use wire::pb;
use wire::server::{ServerLimits, incoming};

struct Stub;

type Events = Pin<Box<dyn Stream<Item = Result<pb::TxStatusEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::sidecar_server::Sidecar for Stub {
    type SubscribeStream = Events;

    async fn subscribe(
        &self,
        _r: Request<Streaming<pb::SubscribeRequest>>,
    ) -> Result<Response<Events>, Status> {
        Err(Status::unimplemented("stub"))
    }
    async fn get_block(&self, _r: Request<pb::BlockQuery>) -> Result<Response<pb::CommittedBlock>, Status> {
        Err(Status::unimplemented("stub"))
    }
    async fn get_tx_status(
        &self,
        r: Request<pb::StatusQuery>,
    ) -> Result<Response<pb::TxStatusBatch>, Status> {
        let n = r.into_inner().tx_ids.len() as u32;
        Ok(Response::new(pb::TxStatusBatch {
            statuses: vec![pb::TxStatus {
                code: n,
                ..Default::default()
            }],
        }))
    }
    async fn get_next_block(
        &self,
        _r: Request<pb::LastCommittedRequest>,
    ) -> Result<Response<pb::NextBlock>, Status> {
        Ok(Response::new(pb::NextBlock { number: 42 }))
    }
}

async fn serve(limits: ServerLimits) -> (std::net::SocketAddr, std::sync::Arc<wire::server::ConnStats>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (inc, stats) = incoming(listener, &limits);
    tokio::spawn(
        wire::server::builder(&limits)
            .add_service(pb::sidecar_server::SidecarServer::new(Stub).max_decoding_message_size(16 << 20))
            .serve_with_incoming(inc),
    );
    (addr, stats)
}

async fn honest_call(addr: std::net::SocketAddr) -> Result<u64, Status> {
    let channel = wire::server::client_endpoint(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let mut c = pb::sidecar_client::SidecarClient::new(channel);
    Ok(c.get_next_block(pb::LastCommittedRequest {})
        .await?
        .into_inner()
        .number)
}

/// Whether the server closed `s` (a read returns end of stream or an error).
async fn closed_by_server(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // The server's HTTP/2 preface and settings: keep reading.
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn idle_connections_neither_lock_out_honest_clients_nor_stay_open() {
    let limits = ServerLimits {
        max_connections: 8,
        idle_timeout: Duration::from_millis(600),
        evict_after: Duration::from_millis(100),
        ..ServerLimits::default()
    };
    let (addr, stats) = serve(limits).await;
    // Far more idle connections than the bound.
    let mut idle = Vec::new();
    for _ in 0..64 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // Wait until they have been idle long enough to be evicted.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let answer = tokio::time::timeout(Duration::from_secs(10), honest_call(addr))
        .await
        .expect("the honest client was not served in time");
    assert_eq!(answer.unwrap(), 42);
    // Every idle connection is closed by the server: refused, evicted or timed out.
    for (i, s) in idle.iter_mut().enumerate() {
        assert!(
            closed_by_server(s, Duration::from_secs(5)).await,
            "idle connection {i} is still open"
        );
    }
    let accepted = stats.accepted.load(Ordering::Relaxed);
    let gone = stats.refused.load(Ordering::Relaxed)
        + stats.evicted.load(Ordering::Relaxed)
        + stats.timed_out.load(Ordering::Relaxed);
    assert!(accepted >= 9, "{accepted}");
    assert!(gone >= 64, "only {gone} idle connections were closed");
}

#[tokio::test]
async fn a_busy_client_is_not_closed_as_idle() {
    let limits = ServerLimits {
        idle_timeout: Duration::from_millis(300),
        ..ServerLimits::default()
    };
    let (addr, stats) = serve(limits).await;
    let channel = wire::server::connect(&wire::server::client_endpoint(format!("http://{addr}")).unwrap())
        .await
        .unwrap();
    let mut c = pb::sidecar_client::SidecarClient::new(channel);
    // Calls every 50 ms for 1.5 s over one connection: it never idles for 300 ms.
    for _ in 0..30 {
        c.get_next_block(pb::LastCommittedRequest {}).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stats.accepted.load(Ordering::Relaxed), 1);
    assert_eq!(stats.timed_out.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_message_over_its_type_limit_is_refused_with_resource_exhausted() {
    let (addr, _) = serve(ServerLimits::default()).await;
    let channel = wire::server::connect(&wire::server::client_endpoint(format!("http://{addr}")).unwrap())
        .await
        .unwrap();
    let mut c = pb::sidecar_client::SidecarClient::new(channel).max_encoding_message_size(64 << 20);
    // More ids than a status query may carry (65,536), well under the service's size
    // limit: refused by the element budget before decoding.
    let many = pb::StatusQuery {
        tx_ids: vec![String::new(); 100_000],
    };
    let err = c.get_tx_status(many).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    assert!(err.message().contains("StatusQuery"), "{}", err.message());
    // The connection and the service keep working.
    let ok = c
        .get_tx_status(pb::StatusQuery {
            tx_ids: vec!["a".into(); 10],
        })
        .await
        .unwrap();
    assert_eq!(ok.into_inner().statuses[0].code, 10);
}
