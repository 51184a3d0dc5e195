//! The Sidecar gRPC service over loopback: block and status lookups, subscriptions
//! answered once (before and after the status is final), half-close, unsubscribe on
//! disconnect, a lagging client dropped, and watches racing with block completion.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use sidecar::notify::{Notifier, NotifierConfig};
use sidecar::service::{ServiceConfig, SidecarGrpc};
use sidecar::store::BlockStore;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::Code;
use tonic::transport::Channel;
use types::{Status, TxId};
use wire::pb;
use wire::pb::sidecar_client::SidecarClient;

struct Node {
    store: BlockStore,
    notifier: Notifier,
    url: String,
    _dir: tempfile::TempDir,
}

impl Node {
    /// Appends then publishes, as the sidecar's block loop does.
    fn complete(&mut self, statuses: &[(&str, Status)]) -> sidecar::notify::PublishReport {
        let n = self.store.next_block();
        let statuses: Vec<(TxId, Status)> = statuses.iter().map(|(i, s)| (TxId(i.to_string()), *s)).collect();
        self.store
            .append(n, format!("block {n}").as_bytes(), &statuses)
            .unwrap();
        self.notifier.publish(n, statuses.clone())
    }

    async fn client(&self) -> SidecarClient<Channel> {
        SidecarClient::connect(self.url.clone()).await.unwrap()
    }
}

async fn serve(capacity: usize, stream_buffer: usize) -> Node {
    serve_with(
        NotifierConfig {
            capacity: std::num::NonZeroUsize::new(capacity).unwrap(),
            // Room for the large subscriptions of the lagging-client test; the limits have
            // tests of their own.
            max_bytes_per_subscription: 256 << 20,
            max_bytes_total: 512 << 20,
        },
        stream_buffer,
    )
    .await
}

async fn serve_with(config: NotifierConfig, stream_buffer: usize) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let store = BlockStore::open(dir.path()).unwrap();
    let notifier = Notifier::new(config, Arc::new(store.reader()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = SidecarGrpc::new(
        store.reader(),
        notifier.clone(),
        ServiceConfig {
            stream_buffer: std::num::NonZeroUsize::new(stream_buffer).unwrap(),
        },
    )
    .into_server();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    Node {
        store,
        notifier,
        url: format!("http://{addr}"),
        _dir: dir,
    }
}

type Requests = mpsc::Sender<pb::SubscribeRequest>;

async fn subscribe(client: &mut SidecarClient<Channel>) -> (Requests, tonic::Streaming<pb::TxStatusEvent>) {
    let (tx, rx) = mpsc::channel(16);
    let events = client
        .subscribe(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, events)
}

async fn watch(tx: &Requests, ids: &[&str]) {
    tx.send(pb::SubscribeRequest {
        tx_ids: ids.iter().map(|s| s.to_string()).collect(),
    })
    .await
    .unwrap();
}

/// (id, code, name, block, index)
fn flat(e: pb::TxStatusEvent) -> (String, u32, String, u64, u32) {
    let s = e.status.unwrap();
    (s.tx_id, s.code, e.status_name, s.block, s.index)
}

async fn next(events: &mut tonic::Streaming<pb::TxStatusEvent>) -> (String, u32, String, u64, u32) {
    let e = tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .expect("event in time")
        .unwrap()
        .expect("stream open");
    flat(e)
}

async fn next_error(events: &mut tonic::Streaming<pb::TxStatusEvent>) -> tonic::Status {
    tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .expect("an answer in time")
        .unwrap_err()
}

async fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn lookups() {
    let mut node = serve(64, 16).await;
    node.complete(&[("a", Status::Committed), ("b", Status::AbortedMvccConflict)]);
    node.complete(&[
        ("c", Status::MalformedNoWrites),
        ("a", Status::RejectedDuplicateTxId),
    ]);
    let mut client = node.client().await;
    let next_block = client.get_next_block(pb::LastCommittedRequest {}).await.unwrap();
    assert_eq!(next_block.into_inner().number, 2);

    let block = client
        .get_block(pb::BlockQuery { number: 1 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(block.number, 1);
    assert_eq!(block.block, b"block 1");
    let statuses: Vec<(String, u32, u64, u32)> = block
        .statuses
        .into_iter()
        .map(|s| (s.tx_id, s.code, s.block, s.index))
        .collect();
    assert_eq!(statuses, vec![("c".into(), 110, 1, 0), ("a".into(), 100, 1, 1)]);
    let missing = client.get_block(pb::BlockQuery { number: 2 }).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);

    let query = pb::StatusQuery {
        tx_ids: vec!["c".into(), "zzz".into(), "a".into()],
    };
    let found: Vec<(String, u32, u64, u32)> = client
        .get_tx_status(query)
        .await
        .unwrap()
        .into_inner()
        .statuses
        .into_iter()
        .map(|s| (s.tx_id, s.code, s.block, s.index))
        .collect();
    // Unknown ids are left out; the duplicate did not overwrite the first status.
    assert_eq!(found, vec![("c".into(), 110, 1, 0), ("a".into(), 1, 0, 0)]);
}

#[tokio::test]
async fn subscribe_before_and_after_final() {
    let mut node = serve(64, 16).await;
    node.complete(&[("old", Status::AbortedSignatureInvalid)]);
    let mut client = node.client().await;
    let (tx, mut events) = subscribe(&mut client).await;
    watch(&tx, &["old", "new"]).await;
    assert_eq!(
        next(&mut events).await,
        ("old".into(), 2, "ABORTED_SIGNATURE_INVALID".into(), 0, 0)
    );
    wait_until("the watch to register", || node.notifier.watched() == 1).await;
    node.complete(&[("x", Status::Committed), ("new", Status::AbortedMvccConflict)]);
    assert_eq!(
        next(&mut events).await,
        ("new".into(), 3, "ABORTED_MVCC_CONFLICT".into(), 1, 1)
    );
    // More ids over time on the same stream; a second completion is not sent again.
    watch(&tx, &["later"]).await;
    wait_until("the second watch", || node.notifier.watched() == 1).await;
    node.complete(&[("new", Status::Committed), ("later", Status::Committed)]);
    assert_eq!(
        next(&mut events).await,
        ("later".into(), 1, "COMMITTED".into(), 2, 1)
    );
    // Half-close with one id pending: the stream ends once it is answered.
    watch(&tx, &["last"]).await;
    drop(tx);
    wait_until("the last watch", || node.notifier.watched() == 1).await;
    node.complete(&[("last", Status::MalformedEmptyKey)]);
    assert_eq!(
        next(&mut events).await,
        ("last".into(), 111, "MALFORMED_EMPTY_KEY".into(), 3, 0)
    );
    let end = tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None)), "{end:?}");
    wait_until("unsubscribe", || node.notifier.subscribers() == 0).await;
}

#[tokio::test]
async fn empty_id_is_refused() {
    let node = serve(64, 16).await;
    let mut client = node.client().await;
    let (tx, mut events) = subscribe(&mut client).await;
    watch(&tx, &["ok", ""]).await;
    let err = events.message().await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn ill_formed_id_is_refused() {
    let node = serve(64, 16).await;
    let mut client = node.client().await;
    for bad in ["has space", "nul\0byte", &"a".repeat(3000)] {
        let (tx, mut events) = subscribe(&mut client).await;
        watch(&tx, &["ok", bad]).await;
        let err = events.message().await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{bad:?}");
    }
    wait_until("nothing watched", || node.notifier.watched() == 0).await;
}

#[tokio::test]
async fn garbage_on_subscribe_ends_the_stream_with_an_error() {
    // Found by the hostile-input review: bytes that do not decode ended the stream with
    // OK and no message. `NextBlock { number }` is a varint in field 1, where
    // `SubscribeRequest` has a string.
    let node = serve(64, 16).await;
    let channel = Channel::from_shared(node.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = wire::codec::BoundedCodec::<pb::NextBlock, pb::TxStatusEvent>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/fabrx.v1.Sidecar/Subscribe");
    let garbage = tokio_stream::iter(vec![pb::NextBlock { number: 5 }]);
    let mut events = grpc
        .streaming(tonic::Request::new(garbage), path, codec)
        .await
        .unwrap()
        .into_inner();
    let err = tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .expect("an answer in time")
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
}

#[tokio::test]
async fn subscriptions_are_bounded_in_bytes() {
    // Found by the hostile-input review: a Subscribe naming 4 M ids added 1.19 GB in 10 s.
    // Here a subscription may hold 100 KB of registrations and all together 120 KB.
    let node = serve_with(
        NotifierConfig {
            capacity: std::num::NonZeroUsize::new(64).unwrap(),
            max_bytes_per_subscription: 100_000,
            max_bytes_total: 120_000,
        },
        16,
    )
    .await;
    let mut client = node.client().await;
    let id = |i: usize| format!("{i:064}");
    let cost = sidecar::notify::registration_bytes(&TxId(id(0)));
    let per_sub = 100_000 / cost;
    // One subscription: up to its limit, then RESOURCE_EXHAUSTED and its ids released.
    let (tx, mut events) = subscribe(&mut client).await;
    let ids: Vec<String> = (0..per_sub).map(id).collect();
    tx.send(pb::SubscribeRequest { tx_ids: ids }).await.unwrap();
    wait_until("the first watches", || node.notifier.watched() == per_sub).await;
    tx.send(pb::SubscribeRequest {
        tx_ids: vec![id(per_sub)],
    })
    .await
    .unwrap();
    let err = next_error(&mut events).await;
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(err.message().contains("this subscription"), "{}", err.message());
    wait_until("released", || node.notifier.watched() == 0).await;
    // Two subscriptions under their own limit but over the total.
    let (tx_a, _events_a) = subscribe(&mut client).await;
    let (tx_b, mut events_b) = subscribe(&mut client).await;
    let half = per_sub * 3 / 4;
    tx_a.send(pb::SubscribeRequest {
        tx_ids: (0..half).map(id).collect(),
    })
    .await
    .unwrap();
    wait_until("a's watches", || node.notifier.watched() == half).await;
    tx_b.send(pb::SubscribeRequest {
        tx_ids: (half..2 * half).map(id).collect(),
    })
    .await
    .unwrap();
    let err = next_error(&mut events_b).await;
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(err.message().contains("all subscriptions"), "{}", err.message());
    wait_until("b released, a kept", || node.notifier.watched() == half).await;
}

#[tokio::test]
async fn disconnect_unsubscribes() {
    let node = serve(64, 16).await;
    let mut client = node.client().await;
    let (tx, events) = subscribe(&mut client).await;
    watch(&tx, &["a", "b"]).await;
    wait_until("the watch", || node.notifier.watched() == 2).await;
    drop(events);
    drop(tx);
    wait_until("unsubscribe", || {
        node.notifier.subscribers() == 0 && node.notifier.watched() == 0
    })
    .await;
}

#[tokio::test]
async fn lagging_client_is_dropped_and_publishing_never_waits() {
    // Room for one block of events: a client that keeps up is never dropped.
    let mut node = serve(200, 1).await;
    // Separate connections: the slow stream must not hold the fast one's flow control.
    let (mut slow_client, mut fast_client) = (node.client().await, node.client().await);
    let (slow_tx, mut slow) = subscribe(&mut slow_client).await;
    let (fast_tx, mut fast) = subscribe(&mut fast_client).await;
    // Ids of the longest allowed length (256): 20 MB of events, more than HTTP/2 windows
    // and socket buffers hold.
    let ids: Vec<String> = (0..80_000).map(|i| format!("t{i:0>255}")).collect();
    for chunk in ids.chunks(1000) {
        let req = pb::SubscribeRequest {
            tx_ids: chunk.to_vec(),
        };
        slow_tx.send(req.clone()).await.unwrap();
        fast_tx.send(req).await.unwrap();
    }
    wait_until("all watches", || node.notifier.watched() == ids.len()).await;
    // Blocks of 100 statuses; the fast client reads each block before the next one.
    let mut dropped = false;
    for (b, chunk) in ids.chunks(100).enumerate() {
        let statuses: Vec<(&str, Status)> = chunk.iter().map(|i| (i.as_str(), Status::Committed)).collect();
        let report = node.complete(&statuses);
        dropped |= !report.dropped.is_empty();
        for i in chunk {
            assert_eq!(next(&mut fast).await.0, *i, "block {b}");
        }
        if dropped {
            break;
        }
    }
    assert!(dropped, "the slow client was never dropped");
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(10), slow.message())
            .await
            .unwrap()
        {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("stream ended without an error"),
            Err(e) => break e,
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("events were not read"), "{status:?}");
    assert_eq!(node.notifier.subscribers(), 1);
}

#[tokio::test]
async fn watches_racing_with_completion_are_answered_exactly_once() {
    let node = serve(100_000, 1024).await;
    let Node {
        mut store,
        notifier,
        url,
        _dir,
    } = node;
    let total = 3_000usize;
    let ids: Vec<String> = (0..total).map(|i| format!("r{i}")).collect();
    let expected: HashMap<String, (u32, u64, u32)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let code = if i % 5 == 0 { 3 } else { 1 };
            (id.clone(), (code, (i / 30) as u64, (i % 30) as u32))
        })
        .collect();
    let mut client = SidecarClient::connect(url).await.unwrap();
    let (tx, mut events) = subscribe(&mut client).await;
    // The block loop completes blocks of 30 while the client watches in chunks of 7.
    let blocks = {
        let ids = ids.clone();
        tokio::task::spawn_blocking(move || {
            for (b, chunk) in ids.chunks(30).enumerate() {
                let statuses: Vec<(TxId, Status)> = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, id)| {
                        let s = if (b * 30 + i) % 5 == 0 {
                            Status::AbortedMvccConflict
                        } else {
                            Status::Committed
                        };
                        (TxId(id.clone()), s)
                    })
                    .collect();
                store.append(b as u64, b"", &statuses).unwrap();
                notifier.publish(b as u64, statuses.clone());
            }
        })
    };
    for chunk in ids.chunks(7) {
        tx.send(pb::SubscribeRequest {
            tx_ids: chunk.to_vec(),
        })
        .await
        .unwrap();
    }
    drop(tx);
    blocks.await.unwrap();
    let mut seen: HashMap<String, (u32, u64, u32)> = HashMap::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .unwrap()
        .unwrap()
    {
        let (id, code, _, block, index) = flat(e);
        assert!(
            seen.insert(id.clone(), (code, block, index)).is_none(),
            "{id} twice"
        );
    }
    assert_eq!(seen, expected);
}
