//! The query service end to end over stand-in validator-committers (an in-memory
//! `VcService` with the committed-state semantics of `ReadRows`, `OwnedRows` and
//! `GetStatuses`; the query crate may not depend on the vcservice role, see
//! `crates/testkit/tests/layering.rs`): answers, failover across the party's vcservices,
//! bad input, the request bound.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;
use common::{check_answers, keys, owned, owned_query, query_node, rows_query};
use query::QueryLimits;
use query::node::{Config as NodeConfig, Deps};
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Code, Request, Response, Status as GrpcStatus, Streaming};
use types::Status;
use types::owned::{OWNER_LEN, owner_of};
use wire::node::Node as _;
use wire::pb;
use wire::pb::query_client::QueryClient;

/// Committed state of a stand-in vcservice: rows of `token` (key → value, version) and
/// tx statuses.
#[derive(Default)]
struct State {
    rows: BTreeMap<Vec<u8>, (Vec<u8>, u64)>,
    statuses: Vec<pb::TxStatus>,
}

/// A stand-in validator-committer answering reads of [`State`] at block 2.
struct FakeVc {
    state: Arc<State>,
}

fn row(k: &[u8], v: &(Vec<u8>, u64)) -> pb::StateRow {
    pb::StateRow {
        key: k.to_vec(),
        value: v.0.clone(),
        version: v.1,
    }
}

type CommitStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::TxStatusBatch, GrpcStatus>> + Send>>;

#[tonic::async_trait]
impl pb::vc_service_server::VcService for FakeVc {
    type CommitStream = CommitStream;

    async fn commit(
        &self,
        _r: Request<Streaming<pb::VcBatch>>,
    ) -> Result<Response<CommitStream>, GrpcStatus> {
        Err(GrpcStatus::unimplemented("stand-in"))
    }
    async fn get_next_block(
        &self,
        _r: Request<pb::LastCommittedRequest>,
    ) -> Result<Response<pb::NextBlock>, GrpcStatus> {
        Ok(Response::new(pb::NextBlock { number: 3 }))
    }
    async fn set_last_committed(
        &self,
        _r: Request<pb::SetLastCommittedRequest>,
    ) -> Result<Response<pb::Ack>, GrpcStatus> {
        Err(GrpcStatus::unimplemented("stand-in"))
    }
    async fn get_statuses(
        &self,
        r: Request<pb::StatusQuery>,
    ) -> Result<Response<pb::TxStatusBatch>, GrpcStatus> {
        let ids = r.into_inner().tx_ids;
        let statuses = self
            .state
            .statuses
            .iter()
            .filter(|s| ids.contains(&s.tx_id))
            .cloned()
            .collect();
        Ok(Response::new(pb::TxStatusBatch { statuses }))
    }
    async fn get_policies(
        &self,
        _r: Request<pb::PoliciesRequest>,
    ) -> Result<Response<pb::PolicyList>, GrpcStatus> {
        Err(GrpcStatus::unimplemented("stand-in"))
    }
    async fn read_rows(&self, r: Request<pb::RowsQuery>) -> Result<Response<pb::RowsResult>, GrpcStatus> {
        let q = r.into_inner();
        let mut keys = q.keys;
        keys.sort();
        keys.dedup();
        let rows = keys
            .iter()
            .filter(|_| q.namespace == "token")
            .filter_map(|k| self.state.rows.get(k).map(|v| row(k, v)))
            .collect();
        Ok(Response::new(pb::RowsResult {
            rows,
            more: false,
            last_committed_block: Some(2),
        }))
    }
    async fn owned_rows(&self, r: Request<pb::OwnedQuery>) -> Result<Response<pb::RowsResult>, GrpcStatus> {
        let q = r.into_inner();
        let limit = q.limit as usize;
        let mut rows: Vec<pb::StateRow> = self
            .state
            .rows
            .iter()
            .filter(|(k, v)| **k > q.after_key && owner_of(&v.0) == Some(q.owner.as_slice()))
            .map(|(k, v)| row(k, v))
            .take(limit + 1)
            .collect();
        let more = rows.len() > limit;
        rows.truncate(limit);
        Ok(Response::new(pb::RowsResult {
            rows,
            more,
            last_committed_block: Some(2),
        }))
    }
}

/// A stand-in vcservice serving in this process.
struct Vc {
    addr: String,
}

/// Three tokens issued at block 1 (t1, t3 to owner 1; t2 to owner 2), t3 spent at block 2.
async fn vcservice() -> Vc {
    let mut state = State::default();
    state.rows.insert(b"t1".to_vec(), (owned(1, "a"), 0));
    state.rows.insert(b"t2".to_vec(), (owned(2, "b"), 0));
    state.rows.insert(b"t3".to_vec(), (b"spent".to_vec(), 1));
    for (id, block) in [("issue", 1), ("spend", 2)] {
        state.statuses.push(pb::TxStatus {
            tx_id: id.into(),
            code: Status::Committed.code(),
            block,
            index: 0,
        });
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let svc = pb::vc_service_server::VcServiceServer::new(FakeVc {
        state: Arc::new(state),
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    Vc { addr }
}

/// An address nothing listens on.
async fn dead_endpoint() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().to_string()
}

/// An endpoint that accepts connections and never answers; reports each connection.
async fn black_hole() -> (String, mpsc::Receiver<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
            let _ = tx.try_send(());
        }
    });
    (addr, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_rows_owned_rows_and_statuses() {
    let vc = vcservice().await;
    let (node, mut client) = query_node(vec![vc.addr.clone()], QueryLimits::default()).await;
    check_answers(&mut client).await;
    // Paging goes through unchanged: one row a page.
    let page = client
        .get_owned(owned_query(1, "", 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((keys(&page), page.more), (vec!["t1".into()], false));
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_over_to_the_next_vcservice() {
    let vc = vcservice().await;
    // The first endpoint refuses connections.
    let (node, mut client) = query_node(
        vec![dead_endpoint().await, vc.addr.clone()],
        QueryLimits::default(),
    )
    .await;
    check_answers(&mut client).await;
    node.stop().await.unwrap();

    // The first endpoint accepts and never answers: the call times out and moves on.
    let (hole, _accepted) = black_hole().await;
    let limits = QueryLimits {
        call_timeout: Duration::from_millis(300),
        ..QueryLimits::default()
    };
    let (node, mut client) = query_node(vec![hole, vc.addr.clone()], limits).await;
    check_answers(&mut client).await;
    node.stop().await.unwrap();

    // None answers: UNAVAILABLE, naming every endpoint.
    let (a, b) = (dead_endpoint().await, dead_endpoint().await);
    let (node, mut client) = query_node(vec![a.clone(), b.clone()], QueryLimits::default()).await;
    let e = client.get_rows(rows_query(&["t1"])).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    assert!(
        e.message().contains(&a) && e.message().contains(&b),
        "{}",
        e.message()
    );
    let e = client.get_owned(owned_query(1, "", 0)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    let e = client
        .get_tx_status(pb::StatusQuery {
            tx_ids: vec!["x".into()],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_invalid_argument() {
    // Behind a dead endpoint: a request that were forwarded would be UNAVAILABLE.
    let (node, mut client) = query_node(vec![dead_endpoint().await], QueryLimits::default()).await;
    let bad_ns = pb::RowsQuery {
        namespace: "Token".into(),
        ..rows_query(&["t1"])
    };
    let long_key = pb::RowsQuery {
        keys: vec![vec![1; types::check::MAX_KEY_LEN + 1]],
        ..rows_query(&[])
    };
    let empty_key = pb::RowsQuery {
        keys: vec![vec![]],
        ..rows_query(&[])
    };
    for q in [bad_ns, long_key, empty_key] {
        let e = client.get_rows(q).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    }
    let short_owner = pb::OwnedQuery {
        owner: vec![1; OWNER_LEN - 1],
        ..owned_query(1, "", 0)
    };
    let bad_ns = pb::OwnedQuery {
        namespace: "x;drop".into(),
        ..owned_query(1, "", 0)
    };
    let long_after = pb::OwnedQuery {
        after_key: vec![1; types::check::MAX_KEY_LEN + 1],
        ..owned_query(1, "", 0)
    };
    for q in [short_owner, bad_ns, long_after] {
        let e = client.get_owned(q).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    }
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_bound_are_refused() {
    let (hole, mut accepted) = black_hole().await;
    let limits = QueryLimits {
        max_concurrent: NonZeroUsize::MIN,
        queue_timeout: Duration::from_millis(100),
        call_timeout: Duration::from_secs(2),
        ..QueryLimits::default()
    };
    let (node, client) = query_node(vec![hole], limits).await;
    let mut first_client = client.clone();
    let first = tokio::spawn(async move { first_client.get_rows(rows_query(&["t1"])).await });
    // The first request holds the only permit once it reaches the upstream.
    accepted.recv().await.unwrap();
    let mut second_client = client.clone();
    let e = second_client.get_rows(rows_query(&["t1"])).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e}");
    let e = first.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    assert!(e.message().contains("no answer within"), "{}", e.message());
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_answers_by_rpc_and_outcome() {
    let vc = vcservice().await;
    let registry = telemetry::Registry::detached("query");
    let mut config = NodeConfig::new("127.0.0.1:0".parse().unwrap(), vec![vc.addr.clone()]);
    config.reads.signed = false;
    let node = query::node::spawn(
        config,
        Deps {
            registry: registry.clone(),
        },
    )
    .await
    .unwrap();
    // The same series the node made (a metric made again in a registry is the same one).
    let metrics = query::metrics::Metrics::register(&registry).unwrap();
    assert!(
        registry
            .text()
            .contains("fabrx_query_requests_total{outcome=\"ok\",rpc=\"owned\"} 0"),
        "every RPC's ok series exists before its first answer"
    );
    let mut client = QueryClient::connect(format!("http://{}", node.addr))
        .await
        .unwrap();
    client.get_rows(rows_query(&["t1"])).await.unwrap();
    client.get_rows(rows_query(&["t1"])).await.unwrap();
    let bad = pb::RowsQuery {
        namespace: "Not A Namespace".into(),
        keys: vec![b"k".to_vec()],
    };
    assert!(client.get_rows(bad).await.is_err());
    let count = |rpc: &str, outcome: &str| metrics.requests.with_label_values(&[rpc, outcome]).get();
    assert_eq!(count("rows", "ok"), 2);
    assert_eq!(count("rows", "InvalidArgument"), 1);
    assert_eq!(metrics.latency.with_label_values(&["rows"]).get_sample_count(), 3);
    assert_eq!(metrics.in_flight.get(), 0);
    let text = registry.text();
    assert!(
        text.contains("fabrx_query_requests_total{outcome=\"ok\",rpc=\"rows\"} 2"),
        "{text}"
    );
    node.stop().await.unwrap();
}

/// Who may read whose tokens (docs/token.md "Who may read what"): only a read signed by
/// the owner, or by an auditor of the network; another client asking for an owner's
/// tokens is refused, however it signs; each reader is held to its rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_or_an_auditor_reads_an_owners_tokens() {
    let vc = vcservice().await;
    let key = |n: &str| crypto::derive_signing_key(crypto::Scheme::Ed25519, n);
    let (alice, mallory, auditor) = (key("alice"), key("mallory"), key("auditor"));
    let addr = |k: &crypto::SigningKey| -> [u8; 32] { k.public_key().as_bytes().try_into().unwrap() };
    let mut config = NodeConfig::new("127.0.0.1:0".parse().unwrap(), vec![vc.addr.clone()]);
    config.reads = query::ReadPolicy {
        signed: true,
        auditors: vec![addr(&auditor)],
        per_reader_per_second: 5,
        per_service_per_second: 0,
    };
    let node = query::node::spawn(config, Deps::default()).await.unwrap();
    let mut client = QueryClient::connect(format!("http://{}", node.addr))
        .await
        .unwrap();
    let now = token::request::unix_now();
    // Owner 1's tokens (t1), asked without a signature, or by mallory however she signs.
    let e = client.get_owned(owned_query(1, "", 0)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e}");
    let owner1 = [1u8; OWNER_LEN];
    let as_auditor = token::read::signed_audit_query(&mallory, "token", &owner1, b"", now);
    let e = client.get_owned(as_auditor).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e}");
    let mut forged = token::read::signed_owned_query(&mallory, "token", b"", 0, now);
    forged.owner = owner1.to_vec();
    let e = client.get_owned(forged).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e}");
    let stale = token::read::signed_owned_query(&alice, "token", b"", 0, now - 3600);
    let e = client.get_owned(stale).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e}");
    // Alice reads her own (she holds nothing here); the auditor reads owner 1's.
    let own = token::read::signed_owned_query(&alice, "token", b"", 0, now);
    assert!(client.get_owned(own).await.unwrap().into_inner().rows.is_empty());
    let audit = token::read::signed_audit_query(&auditor, "token", &owner1, b"", now);
    let page = client.get_owned(audit).await.unwrap().into_inner();
    assert_eq!(keys(&page), vec!["t1".to_string()]);
    // A reader beyond its burst (twice 5 a second) is refused; others are not.
    let mut refused = 0;
    for _ in 0..20 {
        let q = token::read::signed_owned_query(&alice, "token", b"", 0, now);
        if let Err(e) = client.get_owned(q).await {
            assert_eq!(e.code(), Code::ResourceExhausted, "{e}");
            refused += 1;
        }
    }
    assert!(refused >= 5, "{refused} of 20 refused");
    let audit = token::read::signed_audit_query(&auditor, "token", &owner1, b"", now);
    assert!(client.get_owned(audit).await.is_ok());
    node.stop().await.unwrap();
}
