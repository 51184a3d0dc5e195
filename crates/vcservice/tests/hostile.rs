//! The vcservice node under hostile input, on both backends: what an attacker or a buggy
//! upstream sent during the hostile-input review, and what the node must answer now.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

use common::*;
use std::time::Duration;
use types::Status;
use vcservice::config::VcConfig;
use wire::node::Node as _;
use wire::pb;
use wire::pb::vc_service_client::VcServiceClient;

struct Node {
    handle: vcservice::node::Handle,
    url: String,
    _dir: Option<tempfile::TempDir>,
}

async fn spawn(db: String, dir: Option<tempfile::TempDir>) -> Node {
    let config = VcConfig::from_toml(&format!(
        "listen = \"127.0.0.1:0\"\ndb = \"{db}\"\ndurability = \"no-sync\"\n"
    ))
    .unwrap();
    let handle = vcservice::node::spawn(config, vcservice::node::Deps::default())
        .await
        .unwrap();
    let url = format!("http://{}", handle.addr);
    Node {
        handle,
        url,
        _dir: dir,
    }
}

async fn embedded_node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("embedded:{}", dir.path().display());
    spawn(db, Some(dir)).await
}

async fn postgres_node() -> Node {
    let url = testkit::pg::cluster().fresh_database("vc_hostile").await;
    spawn(url, None).await
}

fn wire_tx(t: &vcservice::VcTx, prelim: Option<Status>) -> pb::VcTx {
    pb::VcTx {
        tx_id: t.id.0.clone(),
        block: t.height.block,
        index: t.height.index,
        tx: Some(pb::Tx::from(t.tx.as_ref())),
        prelim_status: prelim.map_or(0, Status::code),
    }
}

/// Sends one batch on its own stream: the answer, or the error that ended the stream.
async fn commit(url: &str, txs: Vec<pb::VcTx>) -> Result<Vec<(String, u32)>, tonic::Status> {
    let mut client = VcServiceClient::connect(url.to_string()).await.unwrap();
    let call = async {
        let mut replies = client
            .commit(tokio_stream::iter(vec![pb::VcBatch { txs }]))
            .await?
            .into_inner();
        let b = replies
            .message()
            .await?
            .ok_or_else(|| tonic::Status::unknown("stream ended with OK and no answer"))?;
        Ok(b.statuses.into_iter().map(|s| (s.tx_id, s.code)).collect())
    };
    tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the vcservice answered in time")
}

async fn stored(url: &str, ids: &[&str]) -> Vec<(String, u32)> {
    let mut client = VcServiceClient::connect(url.to_string()).await.unwrap();
    let found = client
        .get_statuses(pb::StatusQuery {
            tx_ids: ids.iter().map(|s| s.to_string()).collect(),
        })
        .await
        .unwrap()
        .into_inner();
    found.statuses.into_iter().map(|s| (s.tx_id, s.code)).collect()
}

/// Creates namespace `token` and commits `k0` in it.
async fn setup(url: &str) {
    let create = meta("create", 0, 0, "token", None);
    assert_eq!(commit(url, vec![wire_tx(&create, None)]).await.unwrap()[0].1, 1);
    let w = tx("w", 1, 0, vec![ns("token", 0).blind("k0", "v0")]);
    assert_eq!(commit(url, vec![wire_tx(&w, None)]).await.unwrap()[0].1, 1);
}

async fn upstream_cannot_decide_a_commit(url: &str) {
    setup(url).await;
    // A tx with writes that upstream claims is COMMITTED: before, it was stored COMMITTED
    // and its writes were never applied.
    for (id, prelim) in [
        ("sneaky", Status::Committed),
        ("sneaky2", Status::AbortedMvccConflict),
    ] {
        let t = tx(id, 2, 0, vec![ns("token", 0).blind("k1", "v1")]);
        let err = commit(url, vec![wire_tx(&t, Some(prelim))]).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
        assert!(
            err.message().contains("decided by the vcservice"),
            "{}",
            err.message()
        );
    }
    assert!(stored(url, &["sneaky", "sneaky2"]).await.is_empty());
    // An abort decided upstream is still accepted and stored.
    let t = tx("badsig", 2, 1, vec![ns("token", 0).blind("k1", "v1")]);
    let answer = commit(url, vec![wire_tx(&t, Some(Status::AbortedSignatureInvalid))])
        .await
        .unwrap();
    assert_eq!(answer, vec![("badsig".to_string(), 2)]);
    assert_eq!(stored(url, &["badsig"]).await, vec![("badsig".to_string(), 2)]);
}

async fn ill_formed_ids_are_answered_not_retried(url: &str) {
    setup(url).await;
    // Before, txs carrying an upstream status skipped the id checks: on PostgreSQL a 3 KB
    // id or a NUL byte failed 20 times, then UNAVAILABLE, and the sidecar retried forever.
    let long = "x".repeat(3000);
    let ids = [long.as_str(), "nul\0byte", "has space"];
    for prelim in [
        Some(Status::AbortedSignatureInvalid),
        Some(Status::MalformedNoWrites),
        None,
    ] {
        let txs: Vec<pb::VcTx> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let t = tx(id, 3, i as u32, vec![ns("token", 0).blind("k2", "v")]);
                wire_tx(&t, prelim)
            })
            .collect();
        let started = std::time::Instant::now();
        let answer = commit(url, txs).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(answer.len(), 3);
        for (_, code) in &answer {
            assert_eq!(*code, Status::MalformedBadEnvelope.code(), "{prelim:?}");
        }
    }
    // Never stored, and a lookup of such ids answers (nothing) instead of failing.
    assert!(stored(url, &ids).await.is_empty());
    // The honest state is intact.
    let r = tx(
        "r",
        4,
        0,
        vec![ns("token", 0).read("k0", Some(0)).rw("k3", None, "v")],
    );
    assert_eq!(commit(url, vec![wire_tx(&r, None)]).await.unwrap()[0].1, 1);
}

async fn amplifying_batch_is_refused(url: &str) {
    setup(url).await;
    // One tx whose namespace holds 3 Mi empty reads: 6 MiB on the wire, hundreds of MiB
    // once decoded. Refused before decoding.
    let mut t = wire_tx(&tx("amp", 5, 0, vec![ns("token", 0).blind("k4", "v")]), None);
    t.tx.as_mut().unwrap().namespaces[0].reads_only = vec![pb::Read::default(); 3 << 20];
    let err = commit(url, vec![t]).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    // More than the batch limit on the wire: refused on its length.
    let mut big = wire_tx(&tx("big", 5, 1, vec![ns("token", 0).blind("k4", "v")]), None);
    big.tx.as_mut().unwrap().metadata = vec![vec![0; 12 << 20]];
    let err = commit(url, vec![big]).await.unwrap_err();
    // tonic's own length check answers OUT_OF_RANGE.
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err}");
    // Honest clients are still served.
    let ok = tx("after", 6, 0, vec![ns("token", 0).blind("k5", "v")]);
    assert_eq!(commit(url, vec![wire_tx(&ok, None)]).await.unwrap()[0].1, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_upstream_cannot_decide_a_commit() {
    let n = embedded_node().await;
    upstream_cannot_decide_a_commit(&n.url).await;
    n.handle.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_upstream_cannot_decide_a_commit() {
    let n = postgres_node().await;
    upstream_cannot_decide_a_commit(&n.url).await;
    n.handle.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_ill_formed_ids_are_answered_not_retried() {
    let n = embedded_node().await;
    ill_formed_ids_are_answered_not_retried(&n.url).await;
    n.handle.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_ill_formed_ids_are_answered_not_retried() {
    let n = postgres_node().await;
    ill_formed_ids_are_answered_not_retried(&n.url).await;
    n.handle.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_amplifying_batch_is_refused() {
    let n = embedded_node().await;
    amplifying_batch_is_refused(&n.url).await;
    n.handle.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_amplifying_batch_is_refused() {
    let n = postgres_node().await;
    amplifying_batch_is_refused(&n.url).await;
    n.handle.stop().await.unwrap();
}
