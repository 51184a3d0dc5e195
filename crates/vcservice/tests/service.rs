//! The gRPC service end to end: batches streamed in, statuses streamed out, several
//! vcservice instances sharing one database.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

use common::*;
use std::sync::Arc;
use tokio_stream::wrappers::TcpListenerStream;
use types::Status;
use vcservice::service::{PipelineConfig, VcGrpc};
use vcservice::{Engine, EngineConfig, PgBackend, PgOptions};
use wire::pb;
use wire::pb::vc_service_client::VcServiceClient;

async fn serve(engine: Engine) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = VcGrpc::new(
        engine,
        PipelineConfig {
            workers: std::num::NonZeroUsize::new(3).unwrap(),
            queue: std::num::NonZeroUsize::new(4).unwrap(),
            max_in_flight: std::num::NonZeroUsize::new(4).unwrap(),
        },
        vcservice::metrics::Metrics::unexported().unwrap(),
    )
    .into_server();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

fn to_wire(batch: Vec<vcservice::VcTx>) -> pb::VcBatch {
    pb::VcBatch {
        txs: batch
            .into_iter()
            .map(|t| pb::VcTx {
                tx_id: t.id.0,
                block: t.height.block,
                index: t.height.index,
                tx: Some(pb::Tx::from(t.tx.as_ref())),
                prelim_status: t.prelim.map_or(0, |s| s.code()),
            })
            .collect(),
    }
}

/// Streams `batches` and collects every returned status by tx id.
async fn stream(url: String, batches: Vec<pb::VcBatch>) -> Vec<(String, u32, u64)> {
    let mut client = VcServiceClient::connect(url).await.unwrap();
    let n = batches.len();
    let mut replies = client
        .commit(tokio_stream::iter(batches))
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    for _ in 0..n {
        let b = replies.message().await.unwrap().expect("one reply per batch");
        out.extend(b.statuses.into_iter().map(|s| (s.tx_id, s.code, s.block)));
    }
    out.sort();
    out
}

fn batches() -> Vec<pb::VcBatch> {
    let mut out = vec![to_wire(vec![meta("create", 0, 0, "token", None)])];
    for b in 1..6u64 {
        out.push(to_wire(vec![
            tx(
                &format!("w{b}"),
                b,
                0,
                vec![ns("token", 0).blind("hot", &format!("{b}"))],
            ),
            tx(
                &format!("n{b}"),
                b,
                1,
                vec![ns("token", 0).rw(&format!("k{b}"), None, "x")],
            ),
        ]));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_batches_and_answers_queries() {
    let h = embedded().await;
    let url = serve(h.engine.clone()).await;
    // One stream per batch keeps the order of dependent batches (namespace creation first).
    let mut all = Vec::new();
    for b in batches() {
        all.extend(stream(url.clone(), vec![b]).await);
    }
    assert_eq!(all.len(), 11);
    assert!(
        all.iter().all(|(_, code, _)| *code == Status::Committed.code()),
        "{all:?}"
    );
    assert_eq!(state(&h.backend, "token").await.len(), 6);

    let mut client = VcServiceClient::connect(url).await.unwrap();
    let next = client
        .get_next_block(pb::LastCommittedRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.number, 0);
    client
        .set_last_committed(pb::SetLastCommittedRequest { number: 5 })
        .await
        .unwrap();
    let next = client
        .get_next_block(pb::LastCommittedRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.number, 6);
    let found = client
        .get_statuses(pb::StatusQuery {
            tx_ids: vec!["w3".into(), "nope".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(found.statuses.len(), 1);
    assert_eq!((found.statuses[0].code, found.statuses[0].block), (1, 3));

    // A tx without a body is refused with a gRPC error, not a panic.
    let bad = pb::VcBatch {
        txs: vec![pb::VcTx {
            tx_id: "x".into(),
            block: 9,
            index: 0,
            tx: None,
            prelim_status: 0,
        }],
    };
    let mut replies = client
        .commit(tokio_stream::iter(vec![bad]))
        .await
        .unwrap()
        .into_inner();
    let err = replies.message().await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_database_write_each_row_once() {
    let url = testkit::pg::cluster().fresh_database("vcsvc").await;
    let mut urls = Vec::new();
    for _ in 0..2 {
        let backend = Arc::new(PgBackend::connect(&PgOptions::new(url.clone())).unwrap());
        vcservice::Backend::init_schema(backend.as_ref()).await.unwrap();
        urls.push(
            serve(Engine::new(
                backend,
                EngineConfig::default(),
                vcservice::metrics::Metrics::unexported().unwrap(),
            ))
            .await,
        );
    }
    // Both instances get every batch, concurrently, one batch at a time.
    let mut a_all = Vec::new();
    for b in batches() {
        let (a, b2) = tokio::join!(
            stream(urls[0].clone(), vec![b.clone()]),
            stream(urls[1].clone(), vec![b])
        );
        assert_eq!(a, b2);
        a_all.extend(a);
    }
    assert!(a_all.iter().all(|(_, code, _)| *code == 1), "{a_all:?}");
    let reader = PgBackend::connect(&PgOptions::new(url)).unwrap();
    let rows = vcservice::Backend::scan(&reader, "token").await.unwrap();
    let hot = rows.iter().find(|r| r.key == b"hot").unwrap();
    assert_eq!(
        (hot.value.as_slice(), hot.version),
        (b"5".as_slice(), 4),
        "five blind writes, each once"
    );
    assert_eq!(rows.len(), 6);
}

/// A block number at the top of the u64 range is refused with a clear error instead of
/// being stored (it used to make every later GetNextBlock panic on `+ 1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_last_committed_is_refused_and_next_block_keeps_answering() {
    let h = embedded().await;
    let url = serve(h.engine.clone()).await;
    let mut client = VcServiceClient::connect(url).await.unwrap();
    for bad in [u64::MAX, vcservice::MAX_BLOCK_NUMBER + 1] {
        let err = client
            .set_last_committed(pb::SetLastCommittedRequest { number: bad })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    }
    client
        .set_last_committed(pb::SetLastCommittedRequest { number: 7 })
        .await
        .unwrap();
    let next = client
        .get_next_block(pb::LastCommittedRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.number, 8);
}

fn owned_value(owner: u8, len: usize) -> Vec<u8> {
    let mut v = types::owned::OWNED_MAGIC.to_vec();
    v.extend_from_slice(&[owner; types::owned::OWNER_LEN]);
    v.resize(len, b'.');
    v
}

/// `ReadRows` and `OwnedRows`: rows at one snapshot, answers cut at the byte budget with
/// `more`, and bad requests refused with `INVALID_ARGUMENT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_checked_and_bounded() {
    let h = embedded().await;
    h.engine
        .process(vec![meta("create", 0, 0, "token", None)])
        .await
        .unwrap();
    // 14 owned values of ~1 MB: more than one answer's byte budget.
    let big = 1_000_000;
    for i in 0..14u32 {
        let out = h
            .engine
            .process(vec![tx(
                &format!("t{i}"),
                1 + u64::from(i),
                0,
                vec![ns("token", 0).rw_bytes(&format!("k{i:02}"), None, owned_value(1, big))],
            )])
            .await
            .unwrap();
        assert_eq!(out[0].status, Status::Committed);
    }
    h.backend.set_last_committed_block(14).await.unwrap();
    let url = serve(h.engine.clone()).await;
    let mut client = VcServiceClient::connect(url)
        .await
        .unwrap()
        .max_decoding_message_size(wire::limits::ROWS_RESULT.max_bytes);
    let keys: Vec<Vec<u8>> = (0..14).map(|i| format!("k{i:02}").into_bytes()).collect();
    let fit = vcservice::reads::READ_MAX_BYTES / (big + 3);
    assert!(fit < 14);
    let r = client
        .read_rows(pb::RowsQuery {
            namespace: "token".into(),
            keys: keys.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (r.rows.len(), r.more, r.last_committed_block),
        (fit, true, Some(14))
    );
    let rest = client
        .read_rows(pb::RowsQuery {
            namespace: "token".into(),
            keys: keys[fit..].to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((rest.rows.len(), rest.more), (14 - fit, false));
    assert_eq!(rest.rows[0].key, keys[fit]);

    let owned = |after_key: Vec<u8>, owner: Vec<u8>| pb::OwnedQuery {
        namespace: "token".into(),
        owner,
        after_key,
        limit: 0,
        ..Default::default()
    };
    let p1 = client
        .owned_rows(owned(vec![], vec![1; 32]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((p1.rows.len(), p1.more), (fit, true));
    let p2 = client
        .owned_rows(owned(p1.rows.last().unwrap().key.clone(), vec![1; 32]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((p2.rows.len(), p2.more), (14 - fit, false));
    assert!(
        p2.rows
            .iter()
            .all(|r| r.value == owned_value(1, big) && r.version == 0)
    );

    // Bad input: refused before the store is asked.
    let bad_ns = client
        .read_rows(pb::RowsQuery {
            namespace: "Token".into(),
            keys: vec![b"k".to_vec()],
        })
        .await
        .unwrap_err();
    let long_key = client
        .read_rows(pb::RowsQuery {
            namespace: "token".into(),
            keys: vec![vec![1; types::check::MAX_KEY_LEN + 1]],
        })
        .await
        .unwrap_err();
    let short_owner = client.owned_rows(owned(vec![], vec![1; 31])).await.unwrap_err();
    let bad_owned_ns = client
        .owned_rows(pb::OwnedQuery {
            namespace: "ns;drop".into(),
            ..owned(vec![], vec![1; 32])
        })
        .await
        .unwrap_err();
    for e in [bad_ns, long_key, short_owner, bad_owned_ns] {
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    }
}
